package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
)

// lostReply applies every Acquire on the real backend and then loses the
// reply: the caller waits until its context ends, as it would for a reply
// that never arrives.
func lostReply(b backend.Backend) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnAcquire: func(ctx context.Context, next faultbackend.AcquireFunc, key string, o backend.Owner, ttl time.Duration) (backend.Grant, error) {
			if _, err := next(context.WithoutCancel(ctx), key, o, ttl); err != nil {
				return backend.Grant{}, err
			}
			<-ctx.Done()
			return backend.Grant{}, fmt.Errorf("reply lost: %w", ctx.Err())
		},
	}
}

// notSent fails every Acquire as a request that never left the client:
// nothing is applied.
func notSent(b backend.Backend) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnAcquire: func(ctx context.Context, _ faultbackend.AcquireFunc, key string, o backend.Owner, ttl time.Duration) (backend.Grant, error) {
			<-ctx.Done()
			return backend.Grant{}, fmt.Errorf("queued: %w: %w", backend.ErrNotApplied, ctx.Err())
		},
	}
}

// TestAcquireUnknownOutcome: when ctx ends while an applied acquire's reply
// is lost, Acquire reports ErrIndeterminate promptly, and the grant it may
// have left behind is released long before its TTL.
func TestAcquireUnknownOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New()
		lk, err := leasehold.NewLocker(lostReply(mem), leasehold.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err = lk.Acquire(ctx, "k")
		if !errors.Is(err, leasehold.ErrOutcomeIndeterminate) {
			t.Fatalf("Acquire with a lost reply: %v, want ErrIndeterminate", err)
		}
		bkey := leasehold.LockKey(leasehold.DefaultNamespace, "k")
		eventually.True(t, 10*time.Second, "the orphaned grant (TTL 1 min) is released after Acquire gave up", func() bool {
			_, err := mem.Get(context.Background(), bkey)
			return errors.Is(err, backend.ErrNotFound)
		})
	})
}

// TestAcquireNotSent: a request that was never sent is "not acquired", not
// an unknown outcome, for both Acquire and TryAcquire.
func TestAcquireNotSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lk, err := leasehold.NewLocker(notSent(memory.New()))
		if err != nil {
			t.Fatal(err)
		}
		for name, acquire := range map[string]func(context.Context, string) (*leasehold.Lock, error){
			"Acquire": lk.Acquire, "TryAcquire": lk.TryAcquire,
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			_, err := acquire(ctx, "k")
			cancel()
			if !errors.Is(err, leasehold.ErrLockNotAcquired) || errors.Is(err, leasehold.ErrOutcomeIndeterminate) ||
				!errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s of a request never sent: %v, want ErrNotAcquired wrapping DeadlineExceeded", name, err)
			}
		}
	})
}
