package leasehold_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

// slowQueuedReply is a backend.Queue (as the ZooKeeper backend is) whose
// confirming request is applied at once and answered after delay, as a slow
// network does: ZooKeeper's AcquireQueued returns the send time of the
// listing that found the node lowest, and arms the node's TTL timer from
// it, so a reply that arrives past send time + TTL is a grant the backend
// expires (deletes) at once.
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

// TestSlowQueuedReplyNeverReturnsDeadLock: TestSlowAcquireReplyNeverReturnsDeadLock
// for a blocking Acquire on a backend.Queue. lock.go's acquireQueued hands
// the grant to hold() without the late-reply check acquireOnce has (bc250a4),
// so Acquire returns success with a lock whose deadline has already passed
// — the backend may have expired it and granted the key to someone else.
func TestSlowQueuedReplyNeverReturnsDeadLock(t *testing.T) {
	const ttl = 300 * time.Millisecond
	mem := memory.New()
	defer mem.Close()
	lk, err := leasehold.NewLocker(&slowQueuedReply{Backend: mem, delay: 2 * ttl}, leasehold.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // every grant comes late here
	defer cancel()
	l, err := lk.Acquire(ctx, "k")
	if err != nil {
		t.Logf("Acquire: %v (refusing is fine)", err)
		return
	}
	defer l.Release(ctx)
	if d := l.Deadline(); !time.Now().Before(d) {
		t.Fatalf("Acquire returned a lock (token %d) whose deadline %v had passed %v before it returned",
			l.Token(), d.Format("15:04:05.000"), time.Since(d).Round(time.Millisecond))
	}
	got, gerr := mem.Get(ctx, leasehold.LockKey(leasehold.DefaultNamespace, "k"))
	if gerr != nil || got.Token != uint64(l.Token()) {
		t.Fatalf("Acquire returned token %d live, but the backend holds %+v (%v)", l.Token(), got, gerr)
	}
}
