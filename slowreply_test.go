package leasehold_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

// slowAcquireReply applies Acquire at once and delivers its reply after
// delay, as a slow network does.
type slowAcquireReply struct {
	backend.Backend
	delay time.Duration
}

func (b *slowAcquireReply) Acquire(ctx context.Context, key string, o backend.Owner, ttl time.Duration) (backend.Grant, error) {
	g, err := b.Backend.Acquire(ctx, key, o, ttl)
	time.Sleep(b.delay)
	return g, err
}

// TestSlowAcquireReplyNeverReturnsDeadLock: a grant whose reply arrives
// after the holder's deadline (counted from the send time) is no lock the
// caller can use: the backend may already have expired it and granted the
// key to someone else. Acquire must not report success with a lock whose
// deadline has passed; it is confirmed by a renewal or not returned.
func TestSlowAcquireReplyNeverReturnsDeadLock(t *testing.T) {
	const ttl = 300 * time.Millisecond
	mem := memory.New()
	defer mem.Close()
	lk, err := leasehold.NewLocker(&slowAcquireReply{Backend: mem, delay: 2 * ttl}, leasehold.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := lk.TryAcquire(ctx, "k")
	if err != nil {
		if !errors.Is(err, leasehold.ErrNotAcquired) && !errors.Is(err, leasehold.ErrIndeterminate) {
			t.Fatalf("TryAcquire: %v, want a lock, ErrNotAcquired or ErrIndeterminate", err)
		}
		return
	}
	defer l.Release(ctx)
	select {
	case <-l.Done():
		t.Fatalf("TryAcquire returned a lock (token %d) whose context was already done: %v", l.Token(), context.Cause(l.Context()))
	default:
	}
	if got, err := mem.Get(ctx, leasehold.LockKey(leasehold.DefaultNamespace, "k")); err != nil || got.Token != uint64(l.Token()) {
		t.Fatalf("TryAcquire returned token %d live, but the backend holds %+v (%v)", l.Token(), got, err)
	}
}
