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
// partition (requests fail without reaching the backend).
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

func (f *faulty) Renew(ctx context.Context, key string, o backend.Owner, token uint64, ttl time.Duration) (backend.Grant, error) {
	if f.cut() {
		return backend.Grant{}, errInjected
	}
	entered := time.Now()
	g, err := f.Leases.Renew(ctx, key, o, token, ttl)
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
	return f.Leases.Release(ctx, key, o, token)
}

func (f *faulty) Get(ctx context.Context, key string) (backend.Lease, error) {
	if f.cut() {
		return backend.Lease{}, errInjected
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
