package zookeeper_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// TestQueuedWaiterSurvivesSessionExpiry: a waiter queued behind a holder is
// cut off until the server expires its session, which deletes its node. Back
// online (a new session), it must queue again and get the key when the
// holder releases, with a greater token — neither stuck on a vanished node
// nor granted while the holder still holds.
func TestQueuedWaiterSurvivesSessionExpiry(t *testing.T) {
	t.Parallel()
	p, waiterB, direct := behindProxy(t)
	const ttl = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := locker(t, direct, "holder", 10*time.Second).TryAcquire(ctx, "svc/q")
	if err != nil {
		t.Fatal(err)
	}
	queueDir := direct.Prefix() + "/locks/k" + url.QueryEscape("default:lock:svc/q")
	queued := func(n int) {
		t.Helper()
		var (
			names []string
			err   error
		)
		if !eventually.Within(30*time.Second, func() bool {
			names, _, err = direct.Conn().Children(queueDir)
			return err == nil && len(names) == n
		}) {
			t.Fatalf("queue of %d nodes not seen within 30s (last: %v, %v)", n, names, err)
		}
	}
	type result struct {
		l   *leasehold.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := locker(t, waiterB, "waiter", ttl).Acquire(ctx, "svc/q")
		got <- result{l, err}
	}()
	queued(2) // the holder's node and the waiter's
	oldSession := waiterB.Conn().SessionID()
	p.SetDrop(true)
	queued(1) // the server expired the waiter's session and deleted its node
	p.SetDrop(false)
	p.CloseConns()
	queued(2) // back with a new session, the waiter queued again
	if s := waiterB.Conn().SessionID(); s == oldSession {
		t.Fatalf("waiter still on session %x after its expiry", s)
	}
	select {
	case r := <-got:
		t.Fatalf("waiter returned while the holder still held the key: %v", r.err)
	default:
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	defer r.l.Release(ctx)
	if r.l.Token() <= h.Token() {
		t.Fatalf("waiter's token %d not greater than the holder's %d", r.l.Token(), h.Token())
	}
}
