package conformance

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/chaos"
)

// Wire tells the suite how to put fault proxies (internal/chaos) between
// a networked backend and its servers, for the checks that fault single
// requests at the wire (the "Wire" subtest).
type Wire struct {
	// Framer makes the framer of the backend's protocol (chaos.RESP,
	// chaos.Postgres, chaos.MySQL, chaos.ZooKeeper, chaos.HTTP2), so that
	// the proxies can tell one request from the next.
	Framer func() chaos.Framer
	// Open returns two backends over the same fresh data, isolated from
	// every other Open and New (as New), each with connections of its own
	// to the servers, which it dials at the addresses wrap returns: call
	// wrap with each server's address (a proxy per address; calls with the
	// same address share it). The suite closes both. Two, because a request
	// held at the wire blocks its own connection, and a client with a
	// single connection (etcd's gRPC channel, a ZooKeeper session) could
	// not send its retry past it: the retry comes from the second.
	Open func(t testing.TB, wrap func(addr string) string) (first, second backend.Leases)
}

// wireEnv is what a wire check gets: the proxies' shared rules and the
// two backends behind them.
type wireEnv struct {
	*env
	rules  *chaos.Rules
	first  backend.Leases
	second backend.Leases
	nodes  int // proxies Open asked for: one per server
}

type wireCheck struct {
	name string
	fn   func(t T, e *wireEnv)
}

func wireChecks() []wireCheck {
	return []wireCheck{
		{"LateFirstAttemptAfterItsRetry", func(t T, e *wireEnv) { checkLateFirstAttempt(t, e, false) }},
		{"LateFirstAttemptAfterItsClientGaveUp", func(t T, e *wireEnv) { checkLateFirstAttempt(t, e, true) }},
		{"ReplyDroppedAfterApplyRetryIsYours", checkDroppedReply},
		{"AcquireCancelledAtTheWireReturnsUnknown", checkAcquireCancelledAtTheWire},
		{"RenewCancelledAtTheWireReturnsUnknown", checkRenewCancelledAtTheWire},
		{"ReleaseCancelledAtTheWireReturnsUnknown", checkReleaseCancelledAtTheWire},
	}
}

// runWire runs the wire checks under "Wire", or reports them skipped with
// the harness's reason. A harness that neither describes its wire nor
// says why it has none fails with CI=true, so that a new networked
// backend cannot skip them unnoticed.
func runWire(t *testing.T, h Harness, name string) {
	t.Run("Wire", func(t *testing.T) {
		switch {
		case h.Wire != nil:
		case h.NoWire != "":
			t.Skipf("wire checks not run for backend %q: %s", name, h.NoWire)
		case os.Getenv("CI") == "true":
			t.Fatalf("conformance: backend %q has neither Harness.Wire nor Harness.NoWire (CI=true: a networked backend must run the wire checks)", name)
		default:
			t.Skipf("wire checks not run for backend %q: Harness.Wire is nil (and no NoWire reason; with CI=true this fails)", name)
		}
		if h.Wire.Framer == nil || h.Wire.Open == nil {
			t.Fatalf("conformance: Harness.Wire needs both Framer and Open")
		}
		for _, c := range wireChecks() {
			t.Run(c.name, func(t *testing.T) {
				if h.Parallel {
					t.Parallel()
				}
				c.fn(t, newWireEnv(t, h))
			})
		}
	})
}

// newWireEnv starts no proxy itself: Open's calls to wrap start one per
// server address, all sharing one rule set. At the end it fails the
// check if a proxy could not frame the backend's bytes (the faults would
// then never have met a request).
func newWireEnv(t *testing.T, h Harness) *wireEnv {
	rules := chaos.NewRules()
	var mu sync.Mutex
	proxies := map[string]*chaos.Proxy{}
	wrap := func(addr string) string {
		mu.Lock()
		defer mu.Unlock()
		if p, ok := proxies[addr]; ok {
			return p.Addr()
		}
		p, err := chaos.New(addr, chaos.WithFramer(h.Wire.Framer), chaos.WithRules(rules))
		if err != nil {
			t.Fatalf("conformance: proxy for %s: %v", addr, err)
		}
		proxies[addr] = p
		return p.Addr()
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for addr, p := range proxies {
			if err := p.FramingError(); err != nil {
				t.Errorf("the proxy for %s could not frame the backend's bytes, so its faults met no request: %v", addr, err)
			}
			p.Close()
		}
	})
	first, second := h.Wire.Open(t, wrap)
	t.Cleanup(func() { _ = first.Close(); _ = second.Close() })
	mu.Lock()
	nodes := len(proxies)
	mu.Unlock()
	return &wireEnv{env: &env{h: h, tb: t}, rules: rules, first: first, second: second, nodes: nodes}
}

// ownerRequest matches a request that names o: its nonce in hex (redis,
// etcd, ZooKeeper) or as raw bytes (PostgreSQL, MySQL parameters).
func ownerRequest(o backend.Owner) chaos.Match {
	return chaos.Contains([]byte(o.Nonce.String()), o.Nonce[:])
}

// warm acquires and releases key as another owner, so that what a first
// grant creates besides the lease (ZooKeeper's queue node, a counter)
// exists: the faulted request is then the one that grants.
func (e *wireEnv) warm(t T, ctx context.Context, key string, ttl time.Duration) {
	t.Helper()
	w := owner("warm")
	g, err := e.second.Acquire(ctx, key, w, ttl)
	mustNil(t, err, "warming the key up")
	mustNil(t, e.second.Release(ctx, key, w, g.Token), "warming the key up")
}

type acquired struct {
	g   backend.Grant
	err error
}

// checkLateFirstAttempt: A's Acquire is held at the wire (its request to
// every server: the rule holds requests naming A until it holds one per
// proxy); its retry (same owner, from the second client) is granted, A
// releases, B acquires;
// then the held first attempt reaches the server. It must not be granted
// while B holds the key (exclusion), nor leave A a lease with a token not
// above B's (fencing). A late grant after B released is allowed (the
// README: an attempt "may be applied late, even after another owner held
// and released the key") if its token is above B's. With gaveUp, A's
// first Acquire is cancelled and has returned before its request is
// delivered (the server applies it with nobody waiting for the answer);
// otherwise the call is still waiting and gets the late answer.
func checkLateFirstAttempt(t T, e *wireEnv, gaveUp bool) {
	ctx := e.ctx()
	const key = "wire/late"
	a, b := owner("A"), owner("B")
	ttl := e.ttl(30 * time.Second)
	e.warm(t, ctx, key, ttl)
	hold := chaos.NewHold()
	rule := e.rules.Add(ownerRequest(a), hold, 0)

	first := make(chan acquired, 1)
	ctx1, cancel1 := context.WithTimeout(ctx, 20*time.Second)
	defer cancel1()
	go func() {
		g, err := e.first.Acquire(ctx1, key, a, ttl)
		first <- acquired{g, err}
	}()
	select {
	case <-hold.Held():
	case r := <-first:
		t.Fatalf("A's first attempt returned (%+v, %v) before any of its requests reached the wire", r.g, r.err)
	case <-time.After(30 * time.Second):
		t.Fatalf("no request naming A's nonce reached the proxy within 30s")
	}
	eventually(t, 30*time.Second, "A's first attempt held at every server", func() bool { return hold.Count() >= e.nodes })
	e.rules.Remove(rule)
	gA, err := e.second.Acquire(ctx, key, a, ttl)
	mustNil(t, err, "A's retry from the second client, its first attempt held at the wire")
	mustNil(t, e.second.Release(ctx, key, a, gA.Token), "A's Release")
	gB, err := e.second.Acquire(ctx, key, b, ttl)
	mustNil(t, err, "B's Acquire after A released")
	if gB.Token <= gA.Token {
		t.Fatalf("B's token %d is not above A's %d", gB.Token, gA.Token)
	}
	var early *acquired
	if gaveUp {
		cancel1()
		cancelled := time.Now()
		select {
		case r := <-first:
			early = &r
			t.Logf("A's first Acquire returned %v after its cancellation", time.Since(cancelled).Round(time.Millisecond))
		case <-time.After(30 * time.Second):
			t.Fatalf("A's first Acquire did not return within 30s of its cancellation")
		}
	}
	select {
	case r := <-first:
		early = &r
	default:
	}
	hold.Release()
	select {
	case <-hold.Answered():
	case <-time.After(30 * time.Second):
		t.Fatalf("the late first attempt was not answered within 30s of its delivery")
	}
	late := early
	if late == nil {
		select {
		case r := <-first:
			late = &r
		case <-time.After(40 * time.Second):
			t.Fatalf("A's first Acquire did not return within 40s of its request's late delivery")
		}
	}
	t.Logf("A's retry token %d, B's token %d; first attempt (returned before the late delivery: %v): %+v, %v",
		gA.Token, gB.Token, early != nil, late.g, late.err)
	switch {
	case late.err != nil:
	case early != nil && late.g.Token == gA.Token:
		// The client retried on its own, past the hold, before A released:
		// the same grant its retry was told of.
	case early != nil:
		t.Errorf("A's first attempt was granted token %d before the late delivery, its retry token %d: two grants for one request", late.g.Token, gA.Token)
	default:
		t.Errorf("A's first attempt, arriving after B acquired (token %d), was granted token %d: a second live grant", gB.Token, late.g.Token)
	}

	// B holds, alone, with its token.
	l, err := e.second.Get(ctx, key)
	mustNil(t, err, "Get after the late attempt arrived")
	if l.Owner != b || l.Token != gB.Token {
		t.Fatalf("after the late attempt arrived the key is held by %s token %d, want B token %d", l.Owner, l.Token, gB.Token)
	}
	_, err = e.second.Renew(ctx, backend.RenewRequest{Key: key, Owner: b, Token: gB.Token, TTL: ttl})
	mustNil(t, err, "B's Renew after the late attempt arrived")
	_, err = e.second.Acquire(ctx, key, owner("C"), ttl)
	var held *backend.HeldError
	if !errors.As(err, &held) || held.Holder.Owner != b {
		t.Fatalf("C's Acquire while B holds: %v, want held by B", err)
	}
	mustNil(t, e.second.Release(ctx, key, b, gB.Token), "B's Release")
	// A late grant may surface now; never with a token at or below B's.
	if l, err := e.second.Get(ctx, key); err == nil {
		if l.Token <= gB.Token {
			t.Fatalf("after B released, %s holds the key with token %d, not above B's %d: a stale token", l.Owner, l.Token, gB.Token)
		}
		t.Logf("after B released, %s holds the key with token %d (a late grant)", l.Owner, l.Token)
	} else {
		mustIs(t, err, backend.ErrNotFound, "Get after B released")
	}
}

// checkDroppedReply: A's Acquire reaches the server (each server) and is
// applied, and its reply is dropped (the connection closes once the reply is
// complete). The retry from the same client, same owner, must be told
// "yours" with the token the server granted.
func checkDroppedReply(t T, e *wireEnv) {
	ctx := e.ctx()
	const key = "wire/dropped"
	a := owner("A")
	ttl := e.ttl(30 * time.Second)
	e.warm(t, ctx, key, ttl)
	rule := e.rules.Add(ownerRequest(a), chaos.DropReply(), e.nodes) // its request to each server

	ctx1, cancel1 := context.WithTimeout(ctx, 20*time.Second)
	g1, err1 := e.first.Acquire(ctx1, key, a, ttl)
	cancel1()
	select {
	case <-rule.Fired():
	default:
		t.Fatalf("no request naming A's nonce reached the proxy (Acquire: %+v, %v)", g1, err1)
	}
	t.Logf("A's Acquire, its reply dropped: %+v, %v (ErrNotApplied: %v)", g1, err1, errors.Is(err1, backend.ErrNotApplied))
	// A reply exists once its request was applied, so the grant is on the
	// server now, unless the backend undid it after the error.
	applied, err := e.second.Get(ctx, key)
	switch {
	case err == nil && (applied.Owner != a || err1 == nil && applied.Token != g1.Token):
		t.Fatalf("after A's Acquire (%+v, %v) the key is held by %s token %d", g1, err1, applied.Owner, applied.Token)
	case err == nil:
	case err1 == nil:
		t.Fatalf("A's Acquire was granted token %d but Get finds no lease: %v", g1.Token, err)
	case errors.Is(err1, backend.ErrNotApplied):
		mustIs(t, err, backend.ErrNotFound, "Get after A's Acquire was undone (ErrNotApplied)")
		t.Logf("the backend undid A's applied Acquire after losing its reply, and said so")
	default:
		// The outcome was unknown to the caller; the backend cleaned up.
		mustIs(t, err, backend.ErrNotFound, "Get after A's failed Acquire")
		t.Logf("the backend undid A's applied Acquire after losing its reply (its error does not wrap ErrNotApplied)")
	}
	g2, err := e.first.Acquire(ctx, key, a, ttl)
	mustNil(t, err, "A's retry after its reply was dropped")
	if applied.Owner == a && g2.Token != applied.Token {
		t.Fatalf("A's retry was granted token %d, the applied attempt token %d: want the same grant (\"yours\")", g2.Token, applied.Token)
	}
	l, err := e.second.Get(ctx, key)
	mustNil(t, err, "Get after the retry")
	if l.Owner != a || l.Token != g2.Token {
		t.Fatalf("after the retry the key is held by %s token %d, want A token %d", l.Owner, l.Token, g2.Token)
	}
	mustNil(t, e.first.Release(ctx, key, a, g2.Token), "A's Release with the retry's token")
}
