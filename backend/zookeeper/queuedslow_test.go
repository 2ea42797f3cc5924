package zookeeper_test

import (
	"context"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestQueuedSlowReplyNeverReturnsDeadLock: a blocking Acquire on ZooKeeper
// goes through AcquireQueued, which returns the send time of the listing
// that found the waiter's node lowest and arms the node's TTL timer from
// it. If that listing's reply is slow (here every reply is held back 3 s,
// more than the 2 s TTL), the backend's timer is already due when the grant
// returns — it deletes the node at once — and lock.go's acquireQueued hands
// the grant to hold() with no late-reply check (bc250a4 added it to
// acquireOnce only): Acquire reports success with a lock whose deadline had
// passed before it returned.
func TestQueuedSlowReplyNeverReturnsDeadLock(t *testing.T) {
	t.Parallel()
	srv := testserver.ZooKeeper(t)
	p, err := chaos.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	waiterB := open(t, p.Addr(), 20*time.Second)
	direct := open(t, srv.Addr(), 20*time.Second, waiterB.Prefix())
	const ttl = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const key = "svc/queued-slow"
	h, err := locker(t, direct, "holder", ttl).TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *leasehold.Lock
		err error
		at  time.Time
	}
	res := make(chan result, 1)
	go func() {
		l, err := locker(t, waiterB, "waiter", ttl).Acquire(ctx, key)
		res <- result{l, err, time.Now()}
	}()
	// Wait until the waiter's node is in line.
	line := direct.Prefix() + "/locks/k" + url.QueryEscape("default:lock:"+key)
	var queued, kids []string
	if !eventually.Within(10*time.Second, func() bool { // the loop's 500 polls of 10 ms, and then some
		kids, _, err = direct.Conn().Children(line)
		return err == nil && len(kids) >= 2
	}) {
		t.Fatalf("the waiter never queued (%v, %v)", kids, err)
	}
	queued = kids
	p.SetDelay(3 * time.Second)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The waiter's node became the holder with its reply held back past the
	// TTL; once that node is gone (expired by the backend's timer, or given
	// back by the Locker), replies are fast again, and a blocking Acquire
	// must end with a live lock.
	if !eventually.Within(60*time.Second, func() bool { // the loop's 3000 polls of 10 ms, and then some
		kids, _, err = direct.Conn().Children(line)
		return err == nil && !slices.ContainsFunc(kids, func(k string) bool { return slices.Contains(queued, k) })
	}) {
		t.Fatalf("the nodes in line %v are still there: %v (%v)", queued, kids, err)
	}
	p.SetDelay(0)
	var r result
	select {
	case r = <-res:
	case <-time.After(time.Minute):
		t.Fatal("the waiter's Acquire never returned")
	}
	if r.err != nil {
		t.Fatalf("a blocking Acquire after the late grant, with replies fast again: %v, want a live lock", r.err)
	}
	defer r.l.Release(context.Background())
	if d := r.l.Deadline(); !r.at.Before(d) {
		t.Fatalf("Acquire returned a lock (token %d) whose deadline had passed %v before Acquire returned",
			r.l.Token(), r.at.Sub(d).Round(time.Millisecond))
	}
}
