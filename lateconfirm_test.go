package leasehold_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
)

// blipFirst fails the first Acquire as a broken connection would: a plain
// error, so the outcome is unknown to the caller (here nothing was applied).
// Every later request goes through.
func blipFirst(b backend.Backend) *faultbackend.Backend {
	var n atomic.Int64
	return &faultbackend.Backend{
		Next: b,
		OnAcquire: func(ctx context.Context, next faultbackend.AcquireFunc, key string, o backend.Owner, ttl time.Duration) (backend.Grant, error) {
			if n.Add(1) == 1 {
				return backend.Grant{}, errors.New("connection reset by peer")
			}
			return next(ctx, key, o, ttl)
		},
	}
}

// TestAcquireAfterBlipAndLongWait: a blocking Acquire whose first attempt's
// outcome was unknown, then waited behind another holder for longer than a
// TTL, must return a live lock once the key is free — not one whose deadline
// (counted from that first attempt) has already passed. A "held" answer
// proves that no grant of ours existed when it was served, so the grant
// finally answered "yours" was made after that attempt's send time.
func TestAcquireAfterBlipAndLongWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 300 * time.Millisecond
		mem := memory.New()
		lk, err := leasehold.NewLocker(blipFirst(mem), leasehold.WithTTL(ttl),
			leasehold.WithBackoff(5*time.Millisecond, 20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		bkey := leasehold.LockKey(leasehold.DefaultNamespace, "k")
		other := backend.Owner{Instance: "other", Nonce: backend.NewNonce()}
		g, err := mem.Acquire(ctx, bkey, other, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			l   *leasehold.Lock
			err error
		}
		res := make(chan result, 1)
		go func() {
			l, err := lk.Acquire(ctx, "k")
			res <- result{l, err}
		}()
		// The other owner holds the key for several of our TTLs.
		time.Sleep(4 * ttl)
		if err := mem.Release(ctx, bkey, other, g.Token); err != nil {
			t.Fatal(err)
		}
		r := <-res
		if r.err != nil {
			t.Fatalf("Acquire after the key was released: %v", r.err)
		}
		defer r.l.Release(context.Background())
		select {
		case <-r.l.Done():
			t.Fatalf("Acquire returned a lock that is already lost (%v, deadline %v ago): its deadline counts from the attempt before the wait",
				context.Cause(r.l.Context()), time.Since(r.l.Deadline()))
		default:
		}
		if left := time.Until(r.l.Deadline()); left < ttl/2 {
			t.Fatalf("fresh lock's deadline is only %v away (ttl %v)", left, ttl)
		}
	})
}

// TestElectionAfterBlipDoesNotFlap: a candidate whose first campaign attempt
// had an unknown outcome and who then waited out a long term of another
// leader is elected with a live term, not elected and demoted at once.
func TestElectionAfterBlipDoesNotFlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 300 * time.Millisecond
		mem := memory.New()
		bkey := leasehold.RoleKey(leasehold.DefaultNamespace, "r")
		other := backend.Owner{Instance: "other", Nonce: backend.NewNonce()}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		g, err := mem.Acquire(ctx, bkey, other, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var elected, demoted int
		cb := leasehold.Callbacks{
			OnElected: func(leasehold.Token) { mu.Lock(); elected++; mu.Unlock() },
			OnDemoted: func() { mu.Lock(); demoted++; mu.Unlock() },
		}
		el, err := leasehold.NewElector(blipFirst(mem), "r", cb,
			leasehold.WithInstance("me"), leasehold.WithTTL(ttl), leasehold.WithBackoff(5*time.Millisecond, 20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		type term struct {
			elected, demoted int
			lost             error
		}
		terms := make(chan term, 1)
		go func() {
			_ = el.Run(ctx, func(lctx context.Context) error {
				// A live term is renewed by the watchdog: it must outlast
				// several TTLs.
				var lost error
				select {
				case <-lctx.Done():
					lost = context.Cause(lctx)
				case <-time.After(3 * ttl):
				}
				mu.Lock()
				terms <- term{elected, demoted, lost}
				mu.Unlock()
				return nil
			})
		}()
		time.Sleep(4 * ttl)
		if err := mem.Release(ctx, bkey, other, g.Token); err != nil {
			t.Fatal(err)
		}
		select {
		case tm := <-terms:
			if tm.lost != nil || tm.elected != 1 || tm.demoted != 0 {
				t.Fatalf("first term: lost = %v, elected %d times, demoted %d times before it, want nil, 1, 0: the term was lost at once (its deadline counted from the campaign's first attempt)",
					tm.lost, tm.elected, tm.demoted)
			}
		case <-ctx.Done():
			t.Fatal("never elected")
		}
	})
}
