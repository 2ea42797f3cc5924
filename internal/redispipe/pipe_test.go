package redispipe

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// countLua counts its own applications: every run INCRs KEYS[1].
var countLua = goredis.NewScript(`return redis.call('INCR', KEYS[1])`)

// resendSetup is one lane (so two calls share a batch) over a client that
// reaches a fresh server through a chaos proxy, with go-redis's default
// MaxRetries and a short read timeout; direct reads the server itself.
// The first batch of more than one call turns the proxy's reply delay on
// before it is sent; the first (a warm-up) waits until that batch queued.
func resendSetup(t *testing.T) (p *Pipe, px *chaos.Proxy, direct *goredis.Client, warm func(), queued func(n int)) {
	t.Helper()
	srv := testserver.Redis(t)
	var err error
	px, err = chaos.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	c := goredis.NewClient(&goredis.Options{Addr: px.Addr(), ReadTimeout: 400 * time.Millisecond,
		ContextTimeoutEnabled: true, PoolSize: 4})
	t.Cleanup(func() { c.Close() })
	direct = goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { direct.Close() })
	if err := countLua.Load(context.Background(), direct).Err(); err != nil {
		t.Fatal(err)
	}
	p = New(c)
	t.Cleanup(p.Close)
	p.lanes = 1
	p.Batch = true
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	p.BeforeSend = func(n int) {
		if n == 1 {
			<-gate // the warm-up holds the only lane
			return
		}
		px.SetDelay(3 * time.Second) // past every read deadline of the batch
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := p.Do(context.Background(), countLua, []string{"warm"}).Err(); err != nil {
			t.Errorf("warm-up: %v", err)
		}
	}()
	eventually.True(t, 20*time.Second, "the warm-up to hold the lane", func() bool { return p.Queued() == 0 && p.inflightNow() == 1 })
	queued = func(n int) {
		eventually.True(t, 20*time.Second, "the batch to queue", func() bool { return p.Queued() == n })
	}
	warm = func() { open(); wg.Wait() }
	return p, px, direct, warm, queued
}

func (p *Pipe) inflightNow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inflight
}

// TestNoResendAfterCallerStopped: a batch is sent once. A caller whose
// context ended while its call was out was told "unknown"; if go-redis
// then resent the batch (its MaxRetries, after the read timed out or the
// connection dropped) for another member still waiting, the call would be
// applied again after its caller went on — a Redlock undo deleting a later
// grant of the same owner, a retry overtaken by its own first attempt.
func TestNoResendAfterCallerStopped(t *testing.T) {
	for _, fault := range []string{"read timeout", "connection closed"} {
		t.Run(fault, func(t *testing.T) {
			p, px, direct, warm, queued := resendSetup(t)
			short, cancel := context.WithCancel(context.Background())
			defer cancel()
			long, cancelLong := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancelLong()
			a := p.Start(short, countLua, []string{"a"})
			b := p.Start(long, countLua, []string{"b"})
			queued(2)
			warm()
			eventually.True(t, 20*time.Second, "the batch to be applied", func() bool { return direct.Get(context.Background(), "a").Val() == "1" })
			cancel() // a's caller stops waiting while its reply is held
			err := a.Wait().Err()
			if err == nil || errors.Is(err, backend.ErrNotApplied) {
				t.Fatalf("short caller: %v, want an unknown outcome", err)
			}
			if fault == "connection closed" {
				px.SetDelay(0)
				px.CloseConns()
			}
			b.Wait()
			for _, k := range []string{"a", "b"} {
				if n := direct.Get(context.Background(), k).Val(); n != "1" {
					t.Errorf("call %s applied %s times, want once", k, n)
				}
			}
		})
	}
}

var (
	errLua  = goredis.NewScript(`return redis.error_reply('BOOM ' .. ARGV[1])`)
	nilLua  = goredis.NewScript(`return false`)
	echoLua = goredis.NewScript(`return ARGV[1]`)
)

// TestBatchRepliesAfterScriptFlush: the script cache is flushed (SCRIPT
// FLUSH, as after a restart) just before a batch goes out, and one of its
// scripts loaded again: the calls whose EVALSHA failed NOSCRIPT are run
// once more with EVAL, those that ran are not, and every caller gets its
// own reply — an error reply, a nil reply and a value each to the call
// that caused it.
func TestBatchRepliesAfterScriptFlush(t *testing.T) {
	srv := testserver.Redis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	evals := &evalCounter{}
	c.AddHook(evals)
	p := New(c)
	t.Cleanup(p.Close)
	p.lanes = 1
	p.Batch = true
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	ctx := context.Background()
	p.BeforeSend = func(n int) {
		if n == 1 {
			<-gate
			return
		}
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Errorf("script flush: %v", err)
		}
		if err := countLua.Load(ctx, c).Err(); err != nil {
			t.Errorf("script load: %v", err)
		}
	}
	for _, s := range []*goredis.Script{errLua, nilLua, echoLua} {
		if err := s.Load(ctx, c).Err(); err != nil {
			t.Fatal(err)
		}
	}
	warm := make(chan error, 1)
	go func() { warm <- p.Do(ctx, echoLua, nil, "warm").Err() }()
	eventually.True(t, 20*time.Second, "the warm-up to hold the lane", func() bool { return p.Queued() == 0 && p.inflightNow() == 1 })
	type call struct {
		script *goredis.Script
		keys   []string
		arg    string
	}
	calls := []call{
		{echoLua, nil, "e0"}, {countLua, []string{"k1"}, ""}, {errLua, nil, "x2"}, {nilLua, nil, ""},
		{echoLua, nil, "e4"}, {countLua, []string{"k5"}, ""}, {errLua, nil, "x6"}, {echoLua, nil, "e7"},
	}
	ps := make([]*Pending, len(calls))
	for i, cl := range calls {
		ps[i] = p.Start(ctx, cl.script, cl.keys, cl.arg)
	}
	eventually.True(t, 20*time.Second, "the batch to queue", func() bool { return p.Queued() == len(calls) })
	open()
	if err := <-warm; err != nil {
		t.Fatal(err)
	}
	for i, cl := range calls {
		cmd := ps[i].Wait()
		switch cl.script {
		case echoLua:
			if v, err := cmd.Text(); err != nil || v != cl.arg {
				t.Errorf("call %d: %q, %v; want %q", i, v, err, cl.arg)
			}
		case countLua:
			if v, err := cmd.Int(); err != nil || v != 1 {
				t.Errorf("call %d: %d, %v; want 1", i, v, err)
			}
		case errLua:
			if err := cmd.Err(); err == nil || err.Error() != "BOOM "+cl.arg {
				t.Errorf("call %d: %v, want BOOM %s", i, err, cl.arg)
			}
		case nilLua:
			if err := cmd.Err(); !errors.Is(err, goredis.Nil) {
				t.Errorf("call %d: %v, want redis.Nil", i, err)
			}
		}
	}
	for _, k := range []string{"k1", "k5"} {
		if n := c.Get(ctx, k).Val(); n != "1" {
			t.Errorf("%s applied %s times, want once", k, n)
		}
	}
	if n := evals.n.Load(); n != 6 {
		t.Errorf("%d calls fell back to EVAL, want the 6 whose scripts were flushed", n)
	}
}

// evalCounter counts the EVAL commands sent in pipelines.
type evalCounter struct{ n atomic.Int64 }

func (*evalCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (*evalCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (e *evalCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "eval" {
				e.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// TestClosedIsNotApplied: a call made after Close was never sent, and says
// so (ErrNotApplied with ErrClosed), through Do and through Start — a
// Redlock Acquire racing Close counts such a node as holding nothing.
func TestClosedIsNotApplied(t *testing.T) {
	srv := testserver.Redis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	p := New(c)
	p.Close()
	ctx := context.Background()
	for name, err := range map[string]error{
		"Do":    p.Do(ctx, countLua, []string{"k"}).Err(),
		"Start": p.Start(ctx, countLua, []string{"k"}).Wait().Err(),
	} {
		if !errors.Is(err, backend.ErrNotApplied) || !errors.Is(err, backend.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrNotApplied and ErrClosed", name, err)
		}
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Errorf("k exists %d, %v: a call after Close ran", n, err)
	}
}

// TestCloseWithBatchInFlight: Close while a batch is out and its replies
// are held returns (the lanes' round trips are bounded by the client's read
// timeout), every member is answered, and no goroutine of the pipe is left.
func TestCloseWithBatchInFlight(t *testing.T) {
	p, _, direct, warm, queued := resendSetup(t)
	base := runtime.NumGoroutine() // counts the warm-up's, which ends
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := p.Start(ctx, countLua, []string{"a"})
	b := p.Start(ctx, countLua, []string{"b"})
	queued(2)
	warm()
	eventually.True(t, 20*time.Second, "the batch to be applied", func() bool { return direct.Get(context.Background(), "b").Val() == "1" })
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	for name, w := range map[string]*Pending{"a": a, "b": b} {
		if err := w.Wait().Err(); err == nil || errors.Is(err, backend.ErrNotApplied) {
			t.Errorf("%s: %v, want an unknown outcome", name, err)
		}
	}
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return")
	}
	if err := p.Do(ctx, countLua, []string{"c"}).Err(); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
	eventually.True(t, 20*time.Second, "the pipe's goroutines to exit", func() bool { return runtime.NumGoroutine() <= base })
}
