package conformance

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// errInjected is the error the fault wrapper returns for a failed or
// unanswered request: not a sentinel, so the library must treat the outcome
// as unknown.
var errInjected = errors.New("conformance: injected fault")

// call records one request that reached the backend under test.
type call struct {
	op      string    // "acquire" or "renew"
	entered time.Time // when the request was sent (monotonic)
	applied bool
	granted time.Duration
}

// faulty wraps a backend and injects faults between the library and it:
// delayed replies (the request is applied at once, its reply withheld),
// applied-then-failed acquires (a reply lost after the write), and a
// partition (requests fail without reaching the backend). A request whose
// context carries an injection (withFault) gets that fault instead: a
// delayed or lost reply, a request not sent, or one held and delivered
// late, after the caller's later requests; faultyLedger puts the run
// ledger behind the same faults.
type faulty struct {
	backend.Leases

	mu             sync.Mutex
	renewDelay     time.Duration
	loseAcquireAck int // this many applied acquires answer errInjected
	partitioned    bool
	calls          []call
}

func newFaulty(b backend.Leases) *faulty { return &faulty{Leases: b} }

func (f *faulty) setRenewDelay(d time.Duration) { f.mu.Lock(); f.renewDelay = d; f.mu.Unlock() }
func (f *faulty) loseAcquireAcks(n int)         { f.mu.Lock(); f.loseAcquireAck = n; f.mu.Unlock() }
func (f *faulty) partition(on bool)             { f.mu.Lock(); f.partitioned = on; f.mu.Unlock() }

func (f *faulty) record(c call) { f.mu.Lock(); f.calls = append(f.calls, c); f.mu.Unlock() }

func (f *faulty) history() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

func (f *faulty) cut() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.partitioned }

func (f *faulty) Acquire(ctx context.Context, key string, o backend.Owner, ttl time.Duration) (backend.Grant, error) {
	if f.cut() {
		return backend.Grant{}, errInjected
	}
	if g, ok, err := inject(ctx, func(ctx context.Context) (backend.Grant, error) { return f.Leases.Acquire(ctx, key, o, ttl) }); ok {
		return g, err
	}
	entered := time.Now()
	g, err := f.Leases.Acquire(ctx, key, o, ttl)
	f.record(call{op: "acquire", entered: entered, applied: err == nil, granted: g.TTL})
	f.mu.Lock()
	lose := err == nil && f.loseAcquireAck > 0
	if lose {
		f.loseAcquireAck--
	}
	f.mu.Unlock()
	if lose {
		return backend.Grant{}, errInjected
	}
	return g, err
}

func (f *faulty) Renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	if f.cut() {
		return backend.Grant{}, errInjected
	}
	if g, ok, err := inject(ctx, func(ctx context.Context) (backend.Grant, error) { return f.Leases.Renew(ctx, req) }); ok {
		return g, err
	}
	entered := time.Now()
	g, err := f.Leases.Renew(ctx, req)
	f.record(call{op: "renew", entered: entered, applied: err == nil, granted: g.TTL})
	f.mu.Lock()
	d := f.renewDelay
	f.mu.Unlock()
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return backend.Grant{}, ctx.Err() // applied, but the caller cannot know
		}
	}
	return g, err
}

func (f *faulty) Release(ctx context.Context, key string, o backend.Owner, token uint64) error {
	if f.cut() {
		return errInjected
	}
	if _, ok, err := inject(ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, f.Leases.Release(ctx, key, o, token) }); ok {
		return err
	}
	return f.Leases.Release(ctx, key, o, token)
}

func (f *faulty) Get(ctx context.Context, key string) (backend.Lease, error) {
	if f.cut() {
		return backend.Lease{}, errInjected
	}
	if l, ok, err := inject(ctx, func(ctx context.Context) (backend.Lease, error) { return f.Leases.Get(ctx, key) }); ok {
		return l, err
	}
	return f.Leases.Get(ctx, key)
}

// Wait passes push events through when the wrapped backend has them.
func (f *faulty) Wait(ctx context.Context, key string) (<-chan struct{}, error) {
	if n, ok := f.Leases.(backend.Notifier); ok && !f.cut() {
		return n.Wait(ctx, key)
	}
	return nil, errors.ErrUnsupported
}

// faultKind is a fault injected into one request (see withFault).
type faultKind int

const (
	// replyDelayed: the request is applied at once, its reply withheld for
	// the injection's delay.
	replyDelayed faultKind = iota + 1
	// replyLost: the request is applied, its reply lost (errInjected).
	replyLost
	// notSent: a partition; the request never reaches the backend
	// (errInjected).
	notSent
	// heldLate: the request is held in the network and the caller told
	// errInjected at once; it reaches the backend only once release is
	// closed (after the caller's later requests — its retry), and done then
	// gets the instant its late reply came back.
	heldLate
)

// injection is the fault for one request, carried by its context.
type injection struct {
	kind    faultKind
	delay   time.Duration    // replyDelayed
	release <-chan struct{}  // heldLate
	done    chan<- time.Time // heldLate: buffered, gets one value
	within  time.Duration    // heldLate: the late delivery's own deadline
}

type injectionKey struct{}

// withFault returns ctx carrying the fault for the request made with it.
func withFault(ctx context.Context, in *injection) context.Context {
	return context.WithValue(ctx, injectionKey{}, in)
}

// inject runs apply, one request to the backend, through the fault ctx
// carries (if any); handled is false when ctx carries none.
func inject[R any](ctx context.Context, apply func(context.Context) (R, error)) (r R, handled bool, err error) {
	in, _ := ctx.Value(injectionKey{}).(*injection)
	if in == nil {
		return r, false, nil
	}
	switch in.kind {
	case notSent:
		return r, true, errInjected
	case replyLost:
		_, _ = apply(ctx)
		return r, true, errInjected
	case heldLate:
		go func() {
			<-in.release
			lctx, cancel := context.WithTimeout(context.Background(), in.within)
			defer cancel()
			_, _ = apply(lctx)
			in.done <- time.Now()
		}()
		return r, true, errInjected
	case replyDelayed:
		r, err = apply(ctx)
		t := time.NewTimer(in.delay)
		defer t.Stop()
		select {
		case <-t.C:
			return r, true, err
		case <-ctx.Done():
			var zero R
			return zero, true, ctx.Err() // applied, but the caller cannot know
		}
	}
	r, err = apply(ctx)
	return r, true, err
}

// faultyLedger is the run ledger of a backend behind f's faults: the
// partition, and the faults a request's context carries.
type faultyLedger struct {
	f   *faulty
	led backend.Ledger
}

// through runs apply behind the partition and the context's fault.
func through[R any](ctx context.Context, f *faulty, apply func(context.Context) (R, error)) (R, error) {
	if f.cut() {
		var zero R
		return zero, errInjected
	}
	if r, ok, err := inject(ctx, apply); ok {
		return r, err
	}
	return apply(ctx)
}

func (l *faultyLedger) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	return through(ctx, l.f, func(ctx context.Context) (backend.Grant, error) { return l.led.Claim(ctx, req) })
}

func (l *faultyLedger) Reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	return through(ctx, l.f, func(ctx context.Context) (backend.Grant, error) {
		g, _, err := l.led.Reclaim(ctx, req)
		return g, err
	})
}

func (l *faultyLedger) Heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	_, err := through(ctx, l.f, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, l.led.Heartbeat(ctx, req)
	})
	return err
}

func (l *faultyLedger) Finish(ctx context.Context, req backend.FinishRequest) error {
	_, err := through(ctx, l.f, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, l.led.Finish(ctx, req)
	})
	return err
}

func (l *faultyLedger) Abandon(ctx context.Context, job string, at time.Time) error {
	_, err := through(ctx, l.f, func(ctx context.Context) (backend.Run, error) { return l.led.Abandon(ctx, job, at) })
	return err
}

func (l *faultyLedger) Prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	return through(ctx, l.f, func(ctx context.Context) (int, error) { return l.led.Prune(ctx, olderThan, batch) })
}
