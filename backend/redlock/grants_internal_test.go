package redlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/redispipe"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// proxiedBackend starts n redis-servers, each behind a fault proxy, and
// returns a Backend made with opts whose clients reach the nodes through
// the proxies, the proxies, and a direct client to each node (which the
// faults do not touch).
func proxiedBackend(t *testing.T, n int, opts ...Option) (*Backend, []*chaos.Proxy, []*goredis.Client) {
	t.Helper()
	return tunedProxiedBackend(t, n, nil, opts...)
}

// tunedProxiedBackend is proxiedBackend with tune, if not nil, changing
// the options of node i's client through its proxy before it is made.
func tunedProxiedBackend(t *testing.T, n int, tune func(i int, o *goredis.Options), opts ...Option) (*Backend, []*chaos.Proxy, []*goredis.Client) {
	t.Helper()
	var (
		ps []*chaos.Proxy
		ds []*goredis.Client
		cs []goredis.UniversalClient
	)
	for i := range n {
		s := testserver.Redis(t)
		p, err := chaos.New(s.Addr(), chaos.WithFramer(chaos.RESP))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		d := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
		t.Cleanup(func() { d.Close() })
		// Every script is in the node's cache, so that a request held
		// in the network runs when it lands (not NOSCRIPT).
		for _, src := range []string{acquireScript, undoScript, raiseScript, renewScript, releaseScript, getScript} {
			if err := d.ScriptLoad(context.Background(), src).Err(); err != nil {
				t.Fatal(err)
			}
		}
		o := &goredis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1}
		if tune != nil {
			tune(i, o)
		}
		c := goredis.NewClient(o)
		t.Cleanup(func() { c.Close() })
		ps, ds, cs = append(ps, p), append(ds, d), append(cs, c)
	}
	b, err := New(cs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, ps, ds
}

// holder reads which owner holds key on a node, directly ("" if none).
func holder(t *testing.T, b *Backend, d *goredis.Client, key string) backend.Owner {
	t.Helper()
	v, err := d.Get(context.Background(), b.leaseKey(key)).Result()
	if errors.Is(err, goredis.Nil) {
		return backend.Owner{}
	}
	if err != nil {
		t.Fatal(err)
	}
	l, err := parseValue(key, v)
	if err != nil {
		t.Fatal(err)
	}
	return l.Owner
}

// TestLateAttemptAndUndoLeaveTheRetrysGrant is the reported break, end to
// end with the Locker on three real nodes: node 0 is unreachable; node 1
// receives A's first attempt and its undo only after a partition heals
// (held in the network, delivered after the retry), so the Locker's retry
// (same owner nonce) is granted on nodes 1 and 2 first. The late first
// attempt then reaches node 1, and its late undo. Node 0 comes back and B
// tries the key while A's Lock.Context() is live: B must be refused.
func TestLateAttemptAndUndoLeaveTheRetrysGrant(t *testing.T) {
	b, ps, ds := tunedProxiedBackend(t, 3, func(i int, o *goredis.Options) {
		if i == 1 {
			// Two connections, taken oldest first: the first attempt
			// and its undo go out on the two that are open when the
			// network starts holding node 1's requests; the retry,
			// later, on a new one.
			o.PoolSize, o.MinIdleConns, o.PoolFIFO = 2, 2, true
			o.PipelinePoolSize = -1 // the lanes' pipelines on the same two
		}
	}, WithNodeTimeout(time.Second))
	c1 := b.nodes[1].c.(*goredis.Client)
	eventually.True(t, 10*time.Second, "node 1's two connections open and idle", func() bool {
		s := c1.PoolStats()
		return s.IdleConns == 2 && s.TotalConns == 2
	})
	// A connection greets the server on its first use: use both now, so
	// that what is held later is a request, not a greeting.
	for range 2 {
		if err := c1.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if s := c1.PoolStats(); s.TotalConns != 2 {
		t.Fatalf("node 1's pool has %d connections, want 2", s.TotalConns)
	}
	lockers := func(name string) *leasehold.Locker {
		lk, err := leasehold.NewLocker(b, leasehold.WithInstance(name), leasehold.WithTTL(15*time.Second),
			leasehold.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		return lk
	}
	ctx := context.Background()
	const key = "svc/late"
	ps[0].SetDrop(true)
	// Node 1 holds what goes out on the two connections open now (A's
	// first attempt and its undo); the retry goes out on a new one.
	var holds [2]*chaos.Hold
	for i := range holds {
		holds[i] = chaos.NewHold()
		ps[1].Rules().Add(func(r chaos.Request) bool { return r.Conn == i+1 }, holds[i], 0)
	}
	a, err := lockers("A").TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("A's acquire (the retry granted on nodes 1 and 2): %v", err)
	}
	defer a.Release(ctx)
	// Delivered late, one connection at a time in the order they were
	// made, each answered before the next: the first attempt, then its
	// undo, as retransmissions arrive after a partition heals.
	for i, h := range holds {
		if h.Count() == 0 {
			t.Fatalf("node 1 held nothing on connection %d, want A's first attempt and its undo on connections 1 and 2", i+1)
		}
		h.Release()
		select {
		case <-h.Answered():
		case <-time.After(5 * time.Second):
			t.Fatalf("node 1 did not answer the held requests of connection %d within 5s", i+1)
		}
	}
	t.Logf("node 1 after the late first attempt and undo: held by %q", holder(t, b, ds[1], "default:lock:"+key).Instance)
	ps[0].SetDrop(false)
	bl, err := lockers("B").TryAcquire(ctx, key)
	if err == nil {
		defer bl.Release(ctx)
		if a.Context().Err() == nil {
			t.Fatalf("B was granted %q (token %d) while A's lock (token %d) is live with %v left: two holders",
				key, bl.Token(), a.Token(), time.Until(a.Deadline()).Round(time.Millisecond))
		}
		t.Fatalf("B was granted %q; A's lock was lost: %v", key, context.Cause(a.Context()))
	}
	if !errors.Is(err, leasehold.ErrLockNotAcquired) || !errors.Is(err, backend.ErrLeaseHeld) {
		t.Fatalf("B's TryAcquire: %v, want ErrNotAcquired (held by A)", err)
	}
	if err := a.Context().Err(); err != nil {
		t.Fatalf("A's lock ended: %v", context.Cause(a.Context()))
	}
}

// TestSentSomewhereIsNotNotApplied: node 0's lanes are all busy with
// releases stuck on its black hole, so A's acquire is never sent to it;
// nodes 1 and 2 apply the grant, but their replies and then the undo are
// lost. Nodes 1 and 2 hold A's lease (a quorum), so TryAcquire must not
// say "not acquired, nothing applied": the outcome is unknown
// (ErrIndeterminate), which is what starts the Locker's cleanup.
func TestSentSomewhereIsNotNotApplied(t *testing.T) {
	// The undo is the second request sent to nodes 1 and 2 once armed:
	// the network drops it (and everything after it); ps is set before
	// the hook is armed.
	var ps []*chaos.Proxy
	var armed atomic.Bool
	var sends [3]atomic.Int32
	made := 0
	hook := func(c *config) error {
		newPipe := c.make.newPipe
		c.make.newPipe = func(cl goredis.UniversalClient) *redispipe.Pipe {
			p, i := newPipe(cl), made
			made++
			if i > 0 {
				p.BeforeSend = func(int) {
					if armed.Load() && sends[i].Add(1) == 2 {
						ps[i].SetDrop(true)
					}
				}
			}
			return p
		}
		return nil
	}
	b, ps, ds := proxiedBackend(t, 3, WithNodeTimeout(500*time.Millisecond), hook)
	ctx := context.Background()
	// Open (and greet on) the connections first: with the faults on, a
	// new connection would not get past its greeting.
	for i := range 8 {
		o := backend.Owner{Instance: "warm", Nonce: backend.NewNonce()}
		g, err := b.Acquire(ctx, "warm", o, time.Second)
		if err != nil {
			t.Fatalf("warm-up %d: %v", i, err)
		}
		if err := b.Release(ctx, "warm", o, g.Token); err != nil {
			t.Fatalf("warm-up %d: %v", i, err)
		}
	}
	// Node 0: a black hole, and every lane busy with a release stuck in it.
	ps[0].SetDrop(true)
	n0 := b.nodes[0]
	for i := range redispipe.DefaultLanes {
		keys, args := b.releaseCall("stuck", backend.Owner{Instance: "s", Nonce: backend.NewNonce()}, uint64(i+1))
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		t.Cleanup(cancel)
		n0.p.Start(rctx, releaseLua, keys, args...)
		eventually.True(t, 10*time.Second, "a lane of node 0 taking a stuck release", func() bool { return n0.p.Queued() == 0 })
	}
	// Nodes 1 and 2 apply what they receive, and their replies are late.
	ps[1].SetDelay(5 * time.Second)
	ps[2].SetDelay(5 * time.Second)
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance("A"), leasehold.WithTTL(30*time.Second),
		leasehold.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	l, err := lk.TryAcquire(ctx, "svc/unsent")
	if err == nil {
		l.Release(ctx)
		t.Fatal("TryAcquire succeeded with no reply from any node")
	}
	bkey := "default:lock:svc/unsent"
	for i := 1; i <= 2; i++ {
		if o := holder(t, b, ds[i], bkey); o.Instance != "A" {
			t.Fatalf("node %d holds %v, want A's lease (the grant applied, its reply and undo lost)", i, o)
		}
	}
	if errors.Is(err, backend.ErrNotApplied) || errors.Is(err, leasehold.ErrLockNotAcquired) || !errors.Is(err, leasehold.ErrOutcomeIndeterminate) {
		t.Fatalf("TryAcquire = %v; nodes 1 and 2 hold A's grant (a quorum): want ErrIndeterminate, not ErrNotAcquired/ErrNotApplied", err)
	}
}
