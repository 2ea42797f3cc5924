package leasehold_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
)

// slowAcquires answers every Acquire after delay (or ctx's end, with its
// error: a request cut short, whose outcome is unknown).
func slowAcquires(b backend.Backend, delay time.Duration) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnAcquire: func(ctx context.Context, next faultbackend.AcquireFunc, key string, o backend.Owner, ttl time.Duration) (backend.Grant, error) {
			t := time.NewTimer(delay)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return backend.Grant{}, ctx.Err()
			case <-t.C:
			}
			return next(ctx, key, o, ttl)
		},
	}
}

// TestAcquireAtDeadlineIsNotAcquired: an Acquire whose context ends while
// another instance holds the key fails with ErrNotAcquired (and the
// context's error), naming the key and the holder; nothing is
// indeterminate, since every request was answered.
func TestAcquireAtDeadlineIsNotAcquired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		holder, err := leasehold.NewLocker(b, leasehold.WithInstance("holder-a"))
		if err != nil {
			t.Fatal(err)
		}
		waiter, err := leasehold.NewLocker(b, leasehold.WithInstance("waiter-b"))
		if err != nil {
			t.Fatal(err)
		}
		l, err := holder.TryAcquire(context.Background(), "jobs/x")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err = waiter.Acquire(ctx, "jobs/x")
		if !errors.Is(err, leasehold.ErrLockNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, leasehold.ErrOutcomeIndeterminate) {
			t.Fatalf("Acquire at its deadline: %v, want ErrNotAcquired wrapping DeadlineExceeded", err)
		}
		want := `acquire "jobs/x": held by holder-a (token ` + l.Token().String() + `)`
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("Acquire at its deadline: %q, want it to contain %q", err, want)
		}
	})
}

// TestAcquireWaitsOutADeadlineItCannotBeat: with less than two round trips
// left before its deadline, a blocking Acquire sends no attempt (one cut
// short would leave an unknown outcome and a cleanup): it reports the key
// held, ErrNotAcquired, not ErrIndeterminate.
func TestAcquireWaitsOutADeadlineItCannotBeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		holder, err := leasehold.NewLocker(mem, leasehold.WithInstance("holder-a"))
		if err != nil {
			t.Fatal(err)
		}
		l, err := holder.TryAcquire(context.Background(), "jobs/x")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(context.Background())
		// Round trips of 200 ms, a deadline of 700 ms: the second attempt is
		// answered with about 250 ms left, less than two round trips.
		waiter, err := leasehold.NewLocker(slowAcquires(mem, 200*time.Millisecond),
			leasehold.WithInstance("waiter-b"), leasehold.WithBackoff(time.Millisecond, 50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		defer cancel()
		_, err = waiter.Acquire(ctx, "jobs/x")
		if !errors.Is(err, leasehold.ErrLockNotAcquired) || errors.Is(err, leasehold.ErrOutcomeIndeterminate) || !strings.Contains(err.Error(), "held by holder-a") {
			t.Fatalf("Acquire near its deadline: %v, want ErrNotAcquired naming holder-a, not indeterminate", err)
		}
	})
}

// outlierAcquires answers one Acquire (the slow-th, counting from 1) after
// delay, every other at once, and closes slowDone when that one returned.
func outlierAcquires(b backend.Backend, slow int, delay time.Duration) (_ *faultbackend.Backend, slowDone <-chan struct{}) {
	n := 0
	done := make(chan struct{})
	return &faultbackend.Backend{
		Next: b,
		OnAcquire: func(ctx context.Context, next faultbackend.AcquireFunc, key string, o backend.Owner, ttl time.Duration) (backend.Grant, error) {
			n++ // one caller: Acquire's attempts are sequential
			if n == slow {
				defer close(done)
				t := time.NewTimer(delay)
				defer t.Stop()
				select {
				case <-ctx.Done():
					return backend.Grant{}, ctx.Err()
				case <-t.C:
				}
			}
			return next(ctx, key, o, ttl)
		},
	}, done
}

// TestAcquireDeadlineIgnoresOneSlowRoundTrip: one slow answer (a GC pause,
// a reconnect) among fast ones is no estimate of the next round trip. A
// blocking Acquire whose second attempt took 1.5 s, with 1.5 s of its
// deadline left when the holder releases, still tries and takes the key:
// it does not wait the deadline out as if every attempt took 1.5 s.
func TestAcquireDeadlineIgnoresOneSlowRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		holder, err := leasehold.NewLocker(mem, leasehold.WithInstance("holder-a"))
		if err != nil {
			t.Fatal(err)
		}
		l, err := holder.TryAcquire(context.Background(), "jobs/x")
		if err != nil {
			t.Fatal(err)
		}
		b, slowDone := outlierAcquires(mem, 2, 1500*time.Millisecond)
		waiter, err := leasehold.NewLocker(b, leasehold.WithInstance("waiter-b"), leasehold.WithBackoff(time.Millisecond, 20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		released := make(chan error, 1)
		go func() { <-slowDone; released <- l.Release(context.Background()) }()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		got, err := waiter.Acquire(ctx, "jobs/x")
		if err != nil {
			t.Fatalf("Acquire after one slow round trip, the key released with half the deadline left: %v, want the lock", err)
		}
		defer got.Release(context.Background())
		if err := <-released; err != nil {
			t.Fatal(err)
		}
	})
}
