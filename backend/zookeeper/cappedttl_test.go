package zookeeper_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestLockLongerThanTheSession: the backend grants a lock TTL no longer
// than its session timeout. A Locker whose renew period was validated
// against the TTL it asked for (here every 1 s for 3 s) must still renew
// the shorter grant (1 s) before its deadline, not lose every lock before
// its first renewal.
func TestLockLongerThanTheSession(t *testing.T) {
	t.Parallel()
	srv := testserver.ZooKeeper(t)
	b := open(t, srv.Addr(), time.Second)
	const ttl = 3 * time.Second
	if got := b.SessionTimeout(); got >= ttl {
		t.Fatalf("session timeout %v, want less than the lock's ttl %v for this test", got, ttl)
	}
	ctx := context.Background()
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance("capped"), leasehold.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	l, err := lk.TryAcquire(ctx, "svc/capped")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	// Held for three granted TTLs: each needed a renewal before its deadline.
	held := time.NewTimer(3 * b.SessionTimeout())
	defer held.Stop()
	select {
	case <-l.Context().Done():
		t.Fatalf("lock lost %v: a %v grant was not renewed before its deadline", context.Cause(l.Context()), b.SessionTimeout())
	case <-held.C:
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}
