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

// countAcquires counts the Acquire requests that reach the backend in n.
func countAcquires(b backend.Backend, n *atomic.Int64) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnAcquire: func(ctx context.Context, next faultbackend.AcquireFunc, key string, o backend.Owner, ttl time.Duration) (backend.Grant, error) {
			n.Add(1)
			return next(ctx, key, o, ttl)
		},
	}
}

// TestAcquireQueuesLocalWaiters: goroutines of one Locker blocked on one key
// ask the backend one at a time, so each grant costs one request, and
// mutual exclusion holds.
func TestAcquireQueuesLocalWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var acquires atomic.Int64
		b := countAcquires(memory.New(), &acquires)
		lk, err := leasehold.NewLocker(b)
		if err != nil {
			t.Fatal(err)
		}
		const n = 50
		var inside, overlap atomic.Int32
		var wg sync.WaitGroup
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := make(chan struct{})
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				l, err := lk.Acquire(ctx, "q")
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) > 1 {
					overlap.Add(1)
				}
				time.Sleep(time.Millisecond) // the work done under the lock
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if overlap.Load() != 0 {
			t.Fatalf("%d overlapping holders", overlap.Load())
		}
		if got := acquires.Load(); got != n {
			t.Fatalf("%d Acquire requests reached the backend for %d grants, want one each", got, n)
		}
	})
}

// TestAcquireQueueContext: a context that ends while its goroutine waits
// behind another of the same Locker is "not acquired", and nothing is sent.
func TestAcquireQueueContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var acquires atomic.Int64
		b := countAcquires(memory.New(), &acquires)
		lk, err := leasehold.NewLocker(b)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		l, err := lk.Acquire(ctx, "q")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		_, err = lk.Acquire(short, "q")
		if !errors.Is(err, leasehold.ErrLockNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire behind a local holder: %v, want ErrNotAcquired wrapping DeadlineExceeded", err)
		}
		if got := acquires.Load(); got != 1 {
			t.Fatalf("%d Acquire requests reached the backend, want 1 (the holder's)", got)
		}
		// TryAcquire does not queue: it asks and is told who holds the key.
		if _, err := lk.TryAcquire(ctx, "q"); !errors.Is(err, backend.ErrLeaseHeld) {
			t.Fatalf("TryAcquire of a held key: %v, want ErrHeld", err)
		}
	})
}

// loseRenewals answers every renewal with ErrLeaseLost.
func loseRenewals(b backend.Backend) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnRenew: func(context.Context, faultbackend.RenewFunc, backend.RenewRequest) (backend.Grant, error) {
			return backend.Grant{}, backend.ErrLeaseLost
		},
	}
}

// TestAcquireQueueLostLock: a lock that is lost gives its turn up at once,
// without waiting for its holder to call Release.
func TestAcquireQueueLostLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lk, err := leasehold.NewLocker(loseRenewals(memory.New()), leasehold.WithTTL(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		first, err := lk.Acquire(ctx, "q")
		if err != nil {
			t.Fatal(err)
		}
		second, err := lk.Acquire(ctx, "q") // first's renewal fails; its turn passes on
		if err != nil {
			t.Fatalf("second Acquire after the first lock was lost: %v", err)
		}
		if !errors.Is(context.Cause(first.Context()), leasehold.ErrLeaseLost) {
			t.Fatalf("first lock: cause %v, want ErrLeaseLost", context.Cause(first.Context()))
		}
		if second.Token() <= first.Token() {
			t.Fatalf("tokens %d then %d: not increasing", first.Token(), second.Token())
		}
		_ = first.Release(ctx)
		_ = second.Release(ctx)
	})
}
