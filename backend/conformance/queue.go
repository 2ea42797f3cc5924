package conformance

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// queueChecks test backend.Queue where a backend implements it (the Locker
// then uses it for every blocking Acquire); others log that they do not.
func queueChecks() []check {
	return []check{
		{"QueuedWaitersTakeTurns", checkQueuedTurns},
		{"QueuedWaiterLeavesWhenCancelled", checkQueuedLeave},
		{"QueuedBadInputChangesNothing", checkQueuedBadInput},
	}
}

func queueOf(t T, b backend.Leases) (backend.Queue, bool) {
	q, ok := b.(backend.Queue)
	if !ok {
		t.Logf("%T does not implement backend.Queue: the Locker retries Acquire", b)
	}
	return q, ok
}

// checkQueuedTurns: 16 queued waiters behind a holder each get the key once,
// one at a time and none before the holder released, with strictly increasing tokens; each grant's send time
// lies within its call.
func checkQueuedTurns(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	q, ok := queueOf(t, b)
	if !ok {
		return
	}
	ttl := e.ttl(30 * time.Second)
	first := owner("first")
	g0, err := b.Acquire(ctx, "queue/k", first, ttl)
	mustNil(t, err, "Acquire by the first holder")
	const waiters = 16
	var (
		mu     sync.Mutex
		inside = 1 // the first holder, until just before its release
		tokens = []uint64{g0.Token}
		wg     sync.WaitGroup
		errs   = make(chan error, waiters)
	)
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := owner("waiter")
			start := time.Now()
			g, sent, err := q.AcquireQueued(ctx, "queue/k", o, ttl)
			if err != nil {
				errs <- err
				return
			}
			if sent.Before(start) || sent.After(time.Now()) {
				errs <- errors.New("the grant's send time lies outside its call")
			}
			if g.TTL <= 0 || g.TTL > ttl {
				errs <- errors.New("granted TTL outside (0, requested]")
			}
			mu.Lock()
			inside++
			if inside != 1 {
				errs <- errors.New("two holders at once")
			}
			tokens = append(tokens, g.Token)
			mu.Unlock()
			if l, err := b.Get(ctx, "queue/k"); err != nil || l.Owner != o || l.Token != g.Token {
				errs <- errors.New("Get does not name the queued waiter that was granted")
			}
			mu.Lock()
			inside--
			mu.Unlock()
			if err := b.Release(ctx, "queue/k", o, g.Token); err != nil {
				errs <- err
			}
		}()
	}
	mu.Lock()
	inside--
	mu.Unlock()
	mustNil(t, b.Release(ctx, "queue/k", first, g0.Token), "Release by the first holder")
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("waiter: %v", err)
	}
	if len(tokens) != waiters+1 {
		t.Fatalf("%d grants, want %d", len(tokens), waiters+1)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("grant %d got token %d after %d", i, tokens[i], tokens[i-1])
		}
	}
}

// checkQueuedLeave: a waiter whose context ends leaves the line: after the
// holder releases, a try by someone else succeeds (at once when the
// backend confirmed the leaving with ErrNotApplied, else eventually).
func checkQueuedLeave(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	q, ok := queueOf(t, b)
	if !ok {
		return
	}
	ttl := e.ttl(30 * time.Second)
	h := owner("holder")
	g, err := b.Acquire(ctx, "queue/leave", h, ttl)
	mustNil(t, err, "Acquire by the holder")
	// The waiter gives up after 300 ms, queued by then on a healthy
	// backend; the check holds whether or not it got that far.
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, _, err = q.AcquireQueued(wctx, "queue/leave", owner("quitter"), ttl)
	mustIs(t, err, context.DeadlineExceeded, "AcquireQueued with a context that ends")
	confirmed := errors.Is(err, backend.ErrNotApplied)
	mustNil(t, b.Release(ctx, "queue/leave", h, g.Token), "Release by the holder")
	next := owner("next")
	var g2 backend.Grant
	try := func() bool {
		g2, err = b.Acquire(ctx, "queue/leave", next, ttl)
		return err == nil
	}
	if confirmed {
		if !try() {
			t.Fatalf("the waiter confirmed it left the line, yet a try after the release failed: %v", err)
		}
	} else {
		eventually(t, 10*time.Second, "a try after an unconfirmed leave", try)
	}
	if g2.Token <= g.Token {
		t.Fatalf("token %d after %d", g2.Token, g.Token)
	}
}

// checkQueuedBadInput: AcquireQueued validates like Acquire.
func checkQueuedBadInput(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	q, ok := queueOf(t, b)
	if !ok {
		return
	}
	ttl := e.ttl(30 * time.Second)
	_, _, err := q.AcquireQueued(ctx, "", owner("a"), ttl)
	mustIs(t, err, backend.ErrInvalid, "AcquireQueued with an empty key")
	_, _, err = q.AcquireQueued(ctx, "queue/bad", backend.Owner{Instance: "a"}, ttl)
	mustIs(t, err, backend.ErrInvalid, "AcquireQueued with a zero nonce")
	if _, err := b.Get(ctx, "queue/bad"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Get after rejected input: %v, want ErrNotFound", err)
	}
}
