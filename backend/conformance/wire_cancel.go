package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/chaos"
)

// cancelBound is how long after its context is cancelled a call whose
// request is held at the wire may take to return: generous for a loaded
// machine, far below a client's read timeout (seconds), which is what a
// call that ignores its context waits for.
const cancelBound = 2 * time.Second

// cancelAtTheWire runs call (as owner a, through e.first) with its
// requests held at the wire (every request naming a or key — etcd names
// a grant it knows by its key and revision only — at every server),
// cancels its context once they are held — with ErrLeaseLost as the
// cause, as a Locker ends a renewal it can no longer prove in time — and
// requires the call to return within cancelBound with an error that says
// the outcome is unknown: neither a success nor ErrNotApplied (the request
// was sent), matching context.Canceled (or a backend's own timeout), and not matching the cause or any
// other definite answer (the chaos checker caught a ZooKeeper Renew whose
// unknown outcome wrapped its context's cause, ErrLeaseLost, and so read as
// "lost" for a lease its owner then released). It returns the hold, still
// holding, and the rule holding it.
func cancelAtTheWire(t T, e *wireEnv, a backend.Owner, key, what string, call func(ctx context.Context) error) (*chaos.Hold, *chaos.Rule) {
	t.Helper()
	hold := chaos.NewHold()
	rule := e.rules.Add(chaos.Contains([]byte(a.Nonce.String()), a.Nonce[:], []byte(key)), hold, 0)
	ctx, cancel := context.WithCancelCause(e.ctx())
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	select {
	case <-hold.Held():
	case err := <-done:
		t.Fatalf("%s returned (%v) before any of its requests reached the wire", what, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("no request of %s (naming its owner's nonce) reached the proxy within 30s", what)
	}
	// Every server's copy held (Redlock sends to each node), and a moment
	// for the client to be well inside its wait for the reply.
	eventually(t, 30*time.Second, what+" held at every server", func() bool { return hold.Count() >= e.nodes })
	time.Sleep(200 * time.Millisecond)
	cancel(backend.ErrLeaseLost)
	cancelled := time.Now()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		hold.Release()
		t.Fatalf("%s, its request held at the wire, did not return within 60s of its context's cancellation", what)
	}
	took := time.Since(cancelled)
	t.Logf("%s returned %v after its context was cancelled: %v", what, took.Round(time.Millisecond), err)
	if took > cancelBound {
		hold.Release()
		t.Fatalf("%s, its request held at the wire, returned %v after its context was cancelled, want within %v (a fault must not hang the caller past its context)", what, took.Round(time.Millisecond), cancelBound)
	}
	switch {
	case err == nil:
		hold.Release()
		t.Fatalf("%s succeeded while its request was held at the wire and its context cancelled: a guess", what)
	case errors.Is(err, backend.ErrNotApplied):
		hold.Release()
		t.Fatalf("%s, its request sent and held at the wire, failed with ErrNotApplied (%v): the request may still be applied, its outcome is unknown", what, err)
	case definiteAnswer(err) != nil:
		hold.Release()
		t.Fatalf("%s, its request held at the wire and its context cancelled with cause ErrLeaseLost, failed with an error matching %v (%v): its outcome is unknown, and the context's cause is the caller's reason to stop waiting, not the backend's answer", what, definiteAnswer(err), err)
	case !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded):
		// DeadlineExceeded: a backend's own per-request timeout (Redlock's
		// node timeout) may end the wait first on a loaded machine.
		hold.Release()
		t.Fatalf("%s, its request held at the wire and its context cancelled, failed with %v, want an error matching context.Canceled (or DeadlineExceeded)", what, err)
	}
	return hold, rule
}

// deliverHeld releases hold and waits until the late requests were
// answered by the servers (applied, or refused).
func deliverHeld(t T, e *wireEnv, hold *chaos.Hold, rule *chaos.Rule) {
	t.Helper()
	e.rules.Remove(rule)
	hold.Release()
	select {
	case <-hold.Answered():
	case <-time.After(30 * time.Second):
		t.Fatalf("the held requests were not answered within 30s of their delivery")
	}
}

// freedForAnother: B acquires key as soon as nothing of a's is left,
// which must happen within within (a's late grant expires, or its
// backend's cleanup deletes it); until then, each attempt finds the key
// held by a, never granted beside it.
func freedForAnother(t T, e *wireEnv, ctx context.Context, key string, a backend.Owner, ttl, within time.Duration) {
	t.Helper()
	b := owner("B")
	var (
		gB      backend.Grant
		heldByA int
	)
	eventually(t, within, "B granted the key after A's late request (its lease expires or is cleaned up)", func() bool {
		g, err := e.second.Acquire(ctx, key, b, ttl)
		var held *backend.HeldError
		switch {
		case err == nil:
			gB = g
			return true
		case errors.As(err, &held) && held.Holder.Owner == a:
			heldByA++
			time.Sleep(50 * time.Millisecond)
			return false
		case errors.Is(err, backend.ErrLeaseHeld) && !errors.As(err, &held):
			// Held, the holder gone before it was named (A's lease
			// ending as B looked): try again.
			return false
		default:
			t.Fatalf("B's Acquire after A's late request: %v, want a grant or held by A", err)
			return false
		}
	})
	t.Logf("B was granted token %d after %d attempts that found the key held by A", gB.Token, heldByA)
	l, err := e.second.Get(ctx, key)
	mustNil(t, err, "Get after B's grant")
	if l.Owner != b || l.Token != gB.Token {
		t.Fatalf("after B was granted token %d the key is held by %s token %d", gB.Token, l.Owner, l.Token)
	}
	mustNil(t, e.second.Release(ctx, key, b, gB.Token), "B's Release")
}

// checkAcquireCancelledAtTheWire: A's Acquire is held at the wire and its
// context cancelled; the call returns within cancelBound, unknown. The
// held request then reaches the server late and may be applied: that
// grant must not stand beside another owner's, and must end (its TTL, or
// the backend's own cleanup of an unknown outcome), freeing the key.
func checkAcquireCancelledAtTheWire(t T, e *wireEnv) {
	ctx := e.ctx()
	const key = "wire/cancel-acquire"
	a := owner("A")
	ttl := e.ttl(2 * time.Second)
	e.warm(t, ctx, key, ttl)
	hold, rule := cancelAtTheWire(t, e, a, key, "A's Acquire", func(ctx context.Context) error {
		_, err := e.first.Acquire(ctx, key, a, ttl)
		return err
	})
	deliverHeld(t, e, hold, rule)
	freedForAnother(t, e, ctx, key, a, ttl, ttl+30*time.Second)
}

// checkRenewCancelledAtTheWire: A holds; its Renew is held at the wire
// and its context cancelled; the call returns within cancelBound,
// unknown. After the late delivery A still holds (renewed or not) with
// its token, and the key is freed by A's Release.
func checkRenewCancelledAtTheWire(t T, e *wireEnv) {
	ctx := e.ctx()
	const key = "wire/cancel-renew"
	a := owner("A")
	ttl := e.ttl(30 * time.Second)
	g, err := e.first.Acquire(ctx, key, a, ttl)
	mustNil(t, err, "A's Acquire")
	hold, rule := cancelAtTheWire(t, e, a, key, "A's Renew", func(ctx context.Context) error {
		_, err := e.first.Renew(ctx, backend.RenewRequest{Key: key, Owner: a, Token: g.Token, TTL: ttl})
		return err
	})
	deliverHeld(t, e, hold, rule)
	l, err := e.second.Get(ctx, key)
	mustNil(t, err, "Get after A's late Renew")
	if l.Owner != a || l.Token != g.Token {
		t.Fatalf("after A's late Renew the key is held by %s token %d, want A token %d", l.Owner, l.Token, g.Token)
	}
	_, err = e.first.Renew(ctx, backend.RenewRequest{Key: key, Owner: a, Token: g.Token, TTL: ttl})
	mustNil(t, err, "A's Renew after its cancelled one")
	mustNil(t, e.first.Release(ctx, key, a, g.Token), "A's Release")
	freedForAnother(t, e, ctx, key, a, ttl, 10*time.Second)
}

// checkReleaseCancelledAtTheWire: A holds; its Release is held at the
// wire and its context cancelled; the call returns within cancelBound,
// unknown. After the late delivery a retried Release ends the lease (or
// finds it ended: ErrLeaseLost), and B acquires.
func checkReleaseCancelledAtTheWire(t T, e *wireEnv) {
	ctx := e.ctx()
	const key = "wire/cancel-release"
	a := owner("A")
	ttl := e.ttl(30 * time.Second)
	g, err := e.first.Acquire(ctx, key, a, ttl)
	mustNil(t, err, "A's Acquire")
	hold, rule := cancelAtTheWire(t, e, a, key, "A's Release", func(ctx context.Context) error {
		return e.first.Release(ctx, key, a, g.Token)
	})
	deliverHeld(t, e, hold, rule)
	if err := e.first.Release(ctx, key, a, g.Token); err != nil && !errors.Is(err, backend.ErrLeaseLost) {
		t.Fatalf("A's retried Release after its cancelled one: %v, want nil or ErrLeaseLost", err)
	}
	freedForAnother(t, e, ctx, key, a, ttl, 10*time.Second)
}

// definiteAnswer returns the sentinel of a definite answer err matches
// (nil: none): what a backend may say only when its server said it.
func definiteAnswer(err error) error {
	for _, s := range []error{backend.ErrLeaseLost, backend.ErrLeaseHeld, backend.ErrNotFound, backend.ErrLeaseNotExpired,
		backend.ErrOccurrenceClaimed, backend.ErrOccurrenceExhausted, backend.ErrOccurrenceOverlap,
		backend.ErrOccurrenceTooEarly, backend.ErrOccurrenceTooLate, backend.ErrRefused, backend.ErrInvalid} {
		if errors.Is(err, s) {
			return s
		}
	}
	return nil
}
