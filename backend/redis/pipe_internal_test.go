package redis

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/redispipe"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// counted is a client whose dials and pipelines are counted.
type counted struct {
	*goredis.Client
	dials, pipelines, pipelined, single atomic.Int64
}

func (c *counted) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c.dials.Add(1)
		return next(ctx, network, addr)
	}
}

func (c *counted) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			c.single.Add(1) // a script call sent on its own
		}
		return next(ctx, cmd)
	}
}

func (c *counted) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.pipelines.Add(1)
		c.pipelined.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// newCounted returns a backend over a counted client on a fresh server.
// The scripts are loaded and one connection is dialled before it returns.
func newCounted(t *testing.T, pool int) (*Backend, *counted) {
	t.Helper()
	srv := testserver.Redis(t)
	c := &counted{Client: goredis.NewClient(&goredis.Options{Addr: srv.Addr(), PoolSize: pool, ContextTimeoutEnabled: true})}
	c.AddHook(c)
	t.Cleanup(func() { c.Close() })
	b, err := New(c.Client, WithPrefix("pipe:"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if !b.pipe.Batched() {
		t.Fatal("a *goredis.Client is not batched")
	}
	b.pipe.Batch = true // a lone request goes through a lane too
	ctx := context.Background()
	o := backend.Owner{Instance: "warm", Nonce: backend.NewNonce()}
	for _, s := range []*goredis.Script{acquireLua, renewLua, releaseLua, getLua} {
		if err := s.Load(ctx, c).Err(); err != nil {
			t.Fatal(err)
		}
	}
	g, err := b.Acquire(ctx, "warm", o, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "warm", o, g.Token); err != nil {
		t.Fatal(err)
	}
	return b, c
}

// holdLanes makes every lane stop before it sends, until the returned
// release func is called (at the latest when the test ends). It counts
// the requests and the batches held.
func holdLanes(t *testing.T, p *redispipe.Pipe) (taken, batches *atomic.Int64, release func()) {
	gate := make(chan struct{})
	taken, batches = new(atomic.Int64), new(atomic.Int64)
	p.BeforeSend = func(n int) {
		taken.Add(int64(n))
		batches.Add(1)
		<-gate
	}
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	return taken, batches, release
}

// TestQueuedIsNotApplied: a request whose context ends while it is still
// queued (every lane busy) reports ErrNotApplied, changes nothing on the
// server (the key stays free and its token counter does not move), and
// the Locker reports it as "not acquired", not as an unknown outcome.
func TestQueuedIsNotApplied(t *testing.T) {
	b, _ := newCounted(t, 4)
	ctx := context.Background()
	owner := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	g, err := b.Acquire(ctx, "k", owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "k", owner, g.Token); err != nil {
		t.Fatal(err)
	}

	// Occupy every lane, as a crowd of batches in flight would.
	_, batches, release := holdLanes(t, b.pipe)
	var busy sync.WaitGroup
	for i := range redispipe.DefaultLanes {
		busy.Add(1)
		go func() {
			defer busy.Done()
			_, _ = b.Get(ctx, "other")
		}()
		// One at a time: each finds the lanes busy and starts the next.
		eventually.True(t, 10*time.Second, "a lane to hold a batch", func() bool { return batches.Load() == int64(i+1) })
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = b.Acquire(short, "k", backend.Owner{Instance: "b", Nonce: backend.NewNonce()}, time.Minute)
	cancel()
	if !errors.Is(err, backend.ErrNotApplied) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with every lane busy: %v, want ErrNotApplied wrapping DeadlineExceeded", err)
	}
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance("c"))
	if err != nil {
		t.Fatal(err)
	}
	short, cancel = context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = lk.Acquire(short, "k")
	cancel()
	if !errors.Is(err, leasehold.ErrLockNotAcquired) || errors.Is(err, leasehold.ErrOutcomeIndeterminate) {
		t.Fatalf("Locker.Acquire with every lane busy: %v, want ErrNotAcquired (and not ErrIndeterminate)", err)
	}
	release()
	busy.Wait()

	// Nothing was changed: the key is free and the next token follows g's.
	if _, err := b.Get(ctx, "k"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Get after the unsent acquire: %v, want ErrNotFound", err)
	}
	g2, err := b.Acquire(ctx, "k", owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Token != g.Token+1 {
		t.Fatalf("token after the unsent acquires = %d, want %d: an unsent request moved the counter", g2.Token, g.Token+1)
	}
}

// TestCancelMidBatchKeepsConnection: a caller whose context ends after its
// request was taken into a batch, before the reply, gets an unknown outcome
// at once (not ErrNotApplied: the request is applied), and the connection
// survives: the requests that follow succeed without a single new dial.
func TestCancelMidBatchKeepsConnection(t *testing.T) {
	b, c := newCounted(t, 4)
	ctx := context.Background()
	cctx, cancel := context.WithCancel(ctx)
	returned := make(chan struct{})
	var once sync.Once
	b.pipe.BeforeSend = func(int) {
		once.Do(func() {
			cancel()
			<-returned // the caller has given up before its request is sent
		})
	}
	owner := backend.Owner{Instance: "gone", Nonce: backend.NewNonce()}
	_, err := b.Acquire(cctx, "k", owner, time.Minute)
	close(returned)
	if err == nil || errors.Is(err, backend.ErrNotApplied) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire cancelled mid-batch: %v, want an unknown outcome wrapping context.Canceled", err)
	}
	// Honest: it was sent, and it was applied.
	eventually.True(t, 10*time.Second, "the orphaned grant to be applied", func() bool {
		l, err := b.Get(ctx, "k")
		return err == nil && l.Owner == owner
	})
	dials := c.dials.Load()
	for i := range 50 {
		o := backend.Owner{Instance: "next", Nonce: backend.NewNonce()}
		g, err := b.Acquire(ctx, "free", o, time.Minute)
		if err != nil {
			t.Fatalf("acquire %d after the cancelled one: %v", i, err)
		}
		if err := b.Release(ctx, "free", o, g.Token); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
	if d := c.dials.Load() - dials; d != 0 {
		t.Fatalf("%d new dials after a caller gave up mid-batch, want 0: its connection was closed", d)
	}
}

// TestCancelMidBatchLocker: through the Locker, a TryAcquire whose context
// ends mid-batch reports ErrIndeterminate, and the grant it may have left
// is released in the background.
func TestCancelMidBatchLocker(t *testing.T) {
	b, _ := newCounted(t, 4)
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance("gone"))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	var once sync.Once
	b.pipe.BeforeSend = func(int) {
		once.Do(func() {
			cancel()
			<-returned
		})
	}
	_, err = lk.TryAcquire(cctx, "k")
	close(returned)
	if !errors.Is(err, leasehold.ErrOutcomeIndeterminate) {
		t.Fatalf("TryAcquire cancelled mid-batch: %v, want ErrIndeterminate", err)
	}
	eventually.True(t, 10*time.Second, "the orphaned grant to be released", func() bool {
		l, err := b.List(context.Background(), "", 0)
		return err == nil && len(l) == 0
	})
}

// TestBurstFewRoundTrips: a burst of n requests queued while the lanes are
// busy goes out in about n/MaxBatch pipelines, not n round trips.
func TestBurstFewRoundTrips(t *testing.T) {
	const n = 1000
	b, c := newCounted(t, 16)
	taken, _, release := holdLanes(t, b.pipe)
	pipelines, single := c.pipelines.Load(), c.single.Load()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := backend.Owner{Instance: "burst", Nonce: backend.NewNonce()}
			if _, err := b.Acquire(context.Background(), "k"+string(rune('a'+i%26))+strconv.Itoa(i), o, time.Minute); err != nil {
				errs <- err
			}
		}()
	}
	eventually.True(t, 10*time.Second, "the burst to queue", func() bool { return int(taken.Load())+b.pipe.Queued() == n })
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("acquire in the burst: %v", err)
	}
	got := c.pipelines.Load() - pipelines
	bound := int64(2*redispipe.DefaultLanes + (n+redispipe.DefaultMaxBatch-1)/redispipe.DefaultMaxBatch)
	if got > bound {
		t.Fatalf("%d acquires took %d pipelines, want at most %d", n, got, bound)
	}
	if s := c.single.Load() - single; s != 0 {
		t.Fatalf("%d script calls sent outside a pipeline, want 0", s)
	}
	t.Logf("%d acquires in %d pipelines", n, got)
}

// TestCloseAnswersQueued: Close answers a request still queued with
// ErrNotApplied and ErrClosed (it was never sent) instead of leaving its
// caller waiting, and later calls fail with ErrClosed.
func TestCloseAnswersQueued(t *testing.T) {
	b, _ := newCounted(t, 4)
	ctx := context.Background()
	_, batches, release := holdLanes(t, b.pipe)
	for i := range redispipe.DefaultLanes {
		go func() { _, _ = b.Get(ctx, "busy") }()
		eventually.True(t, 10*time.Second, "a lane to hold a batch", func() bool { return batches.Load() == int64(i+1) })
	}
	got := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx, "k", backend.Owner{Instance: "q", Nonce: backend.NewNonce()}, time.Minute)
		got <- err
	}()
	eventually.True(t, 10*time.Second, "the acquire to queue", func() bool { return b.pipe.Queued() == 1 })
	closed := make(chan struct{})
	go func() {
		b.pipe.Close() // waits for the held lanes
		close(closed)
	}()
	err := <-got
	if !errors.Is(err, backend.ErrNotApplied) || !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("queued acquire at Close: %v, want ErrNotApplied and ErrClosed", err)
	}
	release()
	<-closed
	if _, err := b.Get(ctx, "k"); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Get after Close: %v, want ErrClosed", err)
	}
}
