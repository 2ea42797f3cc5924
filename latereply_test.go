package leasehold_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
)

// slowAcquireReply applies Acquire at once and delivers its reply after
// delay, as a slow network does.
func slowAcquireReply(b backend.Backend, delay time.Duration) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnAcquire: func(ctx context.Context, next faultbackend.AcquireFunc, key string, o backend.Owner, ttl time.Duration) (backend.Grant, error) {
			g, err := next(ctx, key, o, ttl)
			time.Sleep(delay)
			return g, err
		},
	}
}

// slowQueuedReply is a backend.Queue (as the ZooKeeper backend is) whose
// confirming request is applied at once and answered after delay:
// ZooKeeper's AcquireQueued returns the send time of the listing that
// found the node lowest, so a reply past send time + TTL is a grant the
// backend has already expired.
type slowQueuedReply struct {
	backend.Backend
	delay time.Duration
}

func (b *slowQueuedReply) AcquireQueued(ctx context.Context, key string, o backend.Owner, ttl time.Duration) (backend.Grant, time.Time, error) {
	sent := time.Now()
	g, err := b.Backend.Acquire(ctx, key, o, ttl)
	time.Sleep(b.delay)
	return g, sent, err
}

// TestLateReplyNeverReturnsDeadLock: a grant whose reply arrives after the
// holder's deadline (counted from the send time) is no lock the caller can
// use: the backend may already have expired it and granted the key to
// someone else. It must be confirmed by a renewal or not returned — here
// the lease has expired by then, so the only right answer is a refusal.
// A reply within the deadline must still give a live lock (a Locker that
// refused every slow reply would fail that case).
func TestLateReplyNeverReturnsDeadLock(t *testing.T) {
	const ttl = 300 * time.Millisecond
	for _, c := range []struct {
		name    string
		wrap    func(backend.Backend, time.Duration) backend.Backend
		acquire func(*leasehold.Locker, context.Context, string) (*leasehold.Lock, error)
		refusal error
	}{
		{"TryAcquire", func(b backend.Backend, d time.Duration) backend.Backend { return slowAcquireReply(b, d) },
			(*leasehold.Locker).TryAcquire, leasehold.ErrOutcomeIndeterminate},
		{"queued Acquire", func(b backend.Backend, d time.Duration) backend.Backend { return &slowQueuedReply{b, d} },
			(*leasehold.Locker).Acquire, leasehold.ErrLockNotAcquired},
	} {
		for _, late := range []bool{true, false} {
			delay := ttl / 10
			if late {
				delay = 2 * ttl
			}
			t.Run(c.name+map[bool]string{true: " late", false: " in time"}[late], func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					mem := memory.New()
					defer mem.Close()
					lk, err := leasehold.NewLocker(c.wrap(mem, delay), leasehold.WithTTL(ttl))
					if err != nil {
						t.Fatal(err)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // every grant comes late in the late case
					defer cancel()
					l, err := c.acquire(lk, ctx, "k")
					if late {
						if !errors.Is(err, c.refusal) {
							t.Fatalf("%s with every reply %v late (TTL %v): lock %v, %v; want %v", c.name, delay, ttl, l != nil, err, c.refusal)
						}
						return
					}
					if err != nil {
						t.Fatalf("%s with replies %v late (TTL %v): %v, want a lock", c.name, delay, ttl, err)
					}
					defer l.Release(ctx)
					if err := l.Context().Err(); err != nil {
						t.Fatalf("returned a lock whose context is done: %v", context.Cause(l.Context()))
					}
					if got, err := mem.Get(ctx, leasehold.LockKey(leasehold.DefaultNamespace, "k")); err != nil || got.Token != uint64(l.Token()) {
						t.Fatalf("returned token %d live, but the backend holds %+v (%v)", l.Token(), got, err)
					}
				})
			})
		}
	}
}
