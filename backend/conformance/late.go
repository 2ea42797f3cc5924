package conformance

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
)

// lateApply wraps a backend to stage the interleaving of issue #14 item 1:
// the first Acquire fails at once without reaching the backend, as if the
// connection broke, and is applied later by applyFirst (a request the
// network delivered after the client saw it fail); the second Acquire is
// applied at once but its reply is withheld until releaseSecond. Renew
// fails without reaching the backend once dropRenews is set.
type lateApply struct {
	*faulty

	mu        sync.Mutex
	n         int
	first     func() (backend.Grant, error)
	firstDone chan struct{} // closed when the first request has been staged
	second    chan struct{} // closed when the second request was applied
	hold      chan struct{} // closing it lets the second reply through
	drop      bool          // renewals fail without reaching the backend
	renewals  []time.Time   // send times of applied renewals
}

func newLateApply(b backend.Leases) *lateApply {
	return &lateApply{faulty: newFaulty(b), firstDone: make(chan struct{}), second: make(chan struct{}), hold: make(chan struct{})}
}

func (f *lateApply) Acquire(ctx context.Context, key string, o backend.Owner, ttl time.Duration) (backend.Grant, error) {
	f.mu.Lock()
	f.n++
	n := f.n
	if n == 1 {
		f.first = func() (backend.Grant, error) {
			return f.faulty.Acquire(context.Background(), key, o, ttl)
		}
		close(f.firstDone)
	}
	f.mu.Unlock()
	switch n {
	case 1:
		return backend.Grant{}, errInjected
	case 2:
		g, err := f.faulty.Acquire(ctx, key, o, ttl)
		close(f.second)
		<-f.hold
		return g, err
	}
	return f.faulty.Acquire(ctx, key, o, ttl)
}

func (f *lateApply) applyFirst() (backend.Grant, error) {
	<-f.firstDone
	f.mu.Lock()
	apply := f.first
	f.mu.Unlock()
	return apply()
}

func (f *lateApply) Renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	f.mu.Lock()
	drop := f.drop
	f.mu.Unlock()
	if drop {
		return backend.Grant{}, errInjected
	}
	return f.faulty.Renew(ctx, req)
}

func (f *lateApply) dropRenews() { f.mu.Lock(); f.drop = true; f.mu.Unlock() }

// checkLateAppliedAttempt: attempt 1 of a blocking Acquire is applied after
// the client saw it fail, between attempt 2 being answered "held" (another
// owner held the key then released it) and attempt 3 being answered
// "yours". The holder's deadline must not pass the backend's expiry of that
// grant: when renewals stop, the lock's context must be done before a
// third owner can acquire the key.
func checkLateAppliedAttempt(t T, e *env) {
	b := e.new()
	f := newLateApply(b)
	ctx := e.ctx()
	ttl := e.libTTL()
	const key = "svc/late"
	bkey := "default:lock:" + key
	other := owner("other")
	gOther, err := b.Acquire(ctx, bkey, other, e.ttl(time.Minute))
	mustNil(t, err, "the other owner's Acquire")

	type result struct {
		l   *leasehold.Lock
		err error
	}
	res := make(chan result, 1)
	go func() {
		l, err := e.locker(t, f, "a").Acquire(ctx, key)
		res <- result{l, err}
	}()
	select {
	case <-f.second: // attempt 2 was answered "held"; its reply is withheld
	case <-time.After(30 * time.Second):
		t.Fatalf("the Locker did not retry after its first attempt failed")
	}
	mustNil(t, b.Release(ctx, bkey, other, gOther.Token), "the other owner's Release")
	applied := time.Now()
	g1, err := f.applyFirst()
	mustNil(t, err, "applying the first attempt late")
	// The scenario: the "held" answer arrives most of a TTL after the late
	// grant, so attempt 3 is sent long after the backend started its TTL.
	time.Sleep(time.Until(applied.Add(ttl * 7 / 10)))
	close(f.hold)
	var r result
	select {
	case r = <-res:
	case <-time.After(30 * time.Second):
		t.Fatalf("Acquire did not return after the key was granted to its first attempt")
	}
	if r.err != nil {
		// The lease may already have run out by the time the Locker could
		// confirm it: refusing it is safe, as long as nothing is orphaned.
		t.Logf("Acquire after the late grant: %v", r.err)
		return
	}
	l := r.l
	if uint64(l.Token()) != g1.Token {
		// On a loaded machine attempt 3 may arrive after the late grant
		// expired and make a fresh one: not the scenario, but its deadline
		// must hold all the same.
		t.Logf("lock token %d, the late-applied attempt was granted %d (it expired before attempt 3)", l.Token(), g1.Token)
	}
	f.dropRenews()
	c := owner("c")
	deadline := time.Now().Add(20 * ttl)
	for {
		gc, err := b.Acquire(ctx, bkey, c, ttl)
		if err == nil {
			select {
			case <-l.Done():
			default:
				t.Fatalf("another owner acquired %q with token %d while the first holder's context (token %d, deadline in %v) was live: the deadline outlived the backend's expiry",
					key, gc.Token, l.Token(), time.Until(l.Deadline()))
			}
			if !errors.Is(context.Cause(l.Context()), leasehold.ErrLeaseLost) {
				t.Errorf("cause = %v, want ErrLeaseLost", context.Cause(l.Context()))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key was never free again after renewals stopped: %v", err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
