package zookeeper_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
	"github.com/leasehold/leasehold/backend/zookeeper"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// locker returns a Locker with the given TTL and a 5..100 ms backoff.
func locker(t testing.TB, b backend.Leases, name string, ttl time.Duration) *leasehold.Locker {
	t.Helper()
	return faultkit.Kit{TTL: ttl}.Locker(t, b, name)
}

// TestServerRestartWhileHeld restarts the ZooKeeper server while a lock is
// held. ZooKeeper persists sessions, so the holder's session and node
// survive a restart shorter than the session timeout. Whatever happens to
// the holder, the backend must agree with it: while its context is alive
// the node is its own; and the next grant's token is greater.
//
// Not parallel: the holder's reconnect across the restart is timed by its
// session, and runs alone (before the parallel tests) so that a loaded
// host does not stretch it.
func TestServerRestartWhileHeld(t *testing.T) {
	srv := testserver.ZooKeeper(t)
	const ttl = 10 * time.Second
	b := open(t, srv.Addr(), 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := locker(t, b, "holder", ttl).TryAcquire(ctx, "svc/restart")
	if err != nil {
		t.Fatal(err)
	}
	if got := b.SessionTimeout(); got != 30*time.Second {
		t.Fatalf("negotiated session timeout %v, want the requested 30s within the server's 1s..60s", got)
	}
	srv.Restart()
	other := open(t, srv.Addr(), 30*time.Second, b.Prefix())
	_, err = locker(t, other, "other", ttl).TryAcquire(ctx, "svc/restart")
	if l.Context().Err() == nil {
		var held *backend.HeldError
		if !errors.As(err, &held) || held.Holder.Token != uint64(l.Token()) {
			t.Fatalf("holder alive after the restart, but TryAcquire by another got %v", err)
		}
		t.Logf("holder kept its lock (token %d) across the restart", l.Token())
	} else {
		t.Logf("holder lost its lock during the restart: %v", context.Cause(l.Context()))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after restart: %v", err)
	}
	next, err := locker(t, other, "other", ttl).Acquire(ctx, "svc/restart")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Token() <= l.Token() {
		t.Fatalf("token after restart %d not greater than %d", next.Token(), l.Token())
	}
}

// behindProxy starts a server and returns a backend that reaches it through
// a proxy the test can cut (2 s sessions, so a cut expires them quickly)
// and a backend on the same prefix that reaches it directly.
func behindProxy(t *testing.T) (p *chaos.Proxy, proxied, direct *zookeeper.Backend) {
	t.Helper()
	srv := testserver.ZooKeeper(t)
	p, err := chaos.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	proxied = open(t, p.Addr(), 2*time.Second)
	direct = open(t, srv.Addr(), 10*time.Second, proxied.Prefix())
	return p, proxied, direct
}

// TestSessionExpiry cuts the holder off (a black-hole proxy) until the
// server expires its session. The holder's context ends at its deadline,
// before the server deleted its node; the next holder then gets a greater
// token; and once the holder reconnects (to a new session), its stale
// renewal is refused.
func TestSessionExpiry(t *testing.T) {
	t.Parallel()
	p, holderB, direct := behindProxy(t)
	const ttl = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := locker(t, holderB, "holder", ttl).TryAcquire(ctx, "svc/expire")
	if err != nil {
		t.Fatal(err)
	}
	oldSession := holderB.Conn().SessionID()
	p.SetDrop(true)
	select {
	case <-l.Done():
	case <-time.After(20 * ttl):
		t.Fatalf("holder's context alive %v after it was cut off", 20*ttl)
	}
	gaveUp := time.Now()
	if got, err := direct.Get(ctx, "default:lock:svc/expire"); err == nil && got.Token != uint64(l.Token()) {
		t.Fatalf("another holder (token %d) existed while the cut-off holder's context was alive", got.Token)
	}
	next, err := locker(t, direct, "next", ttl).Acquire(ctx, "svc/expire")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Token() <= l.Token() {
		t.Fatalf("next token %d not greater than %d", next.Token(), l.Token())
	}
	t.Logf("next holder in %v after the old one gave up (session expiry)", time.Since(gaveUp))
	p.SetDrop(false)
	p.CloseConns()
	// Back online, the holder's client finds its session expired and opens
	// a new one; its node died with the old session, and what it reads is
	// the next holder's grant.
	var got backend.Lease
	if !eventually.Within(30*time.Second, func() bool {
		got, err = holderB.Get(ctx, "default:lock:svc/expire")
		return err == nil && holderB.Conn().SessionID() != oldSession
	}) {
		t.Fatalf("old holder's client did not come back with a new session: %v", err)
	}
	if got.Token != uint64(next.Token()) {
		t.Fatalf("after reconnecting the old holder reads token %d, want the next holder's %d", got.Token, next.Token())
	}
}

// slowReplies returns a backend that reaches a fresh server through a proxy
// (10 s sessions, so slow replies do not end the session) and one on the
// same prefix that reaches it directly.
func slowReplies(t *testing.T) (p *chaos.Proxy, proxied, direct *zookeeper.Backend) {
	t.Helper()
	srv := testserver.ZooKeeper(t)
	p, err := chaos.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	proxied = open(t, p.Addr(), 10*time.Second)
	direct = open(t, srv.Addr(), 10*time.Second, proxied.Prefix())
	return p, proxied, direct
}

// keptUntil fails the test if key's node is not owner's at any poll from
// now until deadline (by the direct backend, which is not slowed).
func keptUntil(t *testing.T, direct *zookeeper.Backend, key string, owner backend.Owner, token uint64, deadline time.Time) {
	t.Helper()
	ctx := context.Background()
	for time.Now().Before(deadline) {
		l, err := direct.Get(ctx, key)
		if err != nil || l.Owner != owner || l.Token != token {
			t.Fatalf("%v before the renewed lease's deadline (send time + TTL), key %q reads %+v, %v: its node was deleted under a grant the holder was told it has",
				time.Until(deadline).Round(time.Millisecond), key, l, err)
		}
		time.Sleep(50 * time.Millisecond) // the poll interval of a check that runs until a deadline
	}
}

// TestRenewInFlightWhenTheOldTimerFires: a renewal is sent before the
// lease's TTL timer fires, and its reply comes after. The timer must not
// delete the node the renewal kept: the holder is told its lease runs to
// the renewal's send time + TTL. (The chaos checker caught this on a
// ZooKeeper restart: a grant answered "ok", then lost 20 ms later.)
func TestRenewInFlightWhenTheOldTimerFires(t *testing.T) {
	t.Parallel()
	p, b, direct := slowReplies(t)
	ctx := context.Background()
	const ttl = 6 * time.Second
	owner := backend.Owner{Instance: "w", Nonce: backend.NewNonce()}
	t0 := time.Now()
	g, err := b.Acquire(ctx, "svc/renew-late", owner, ttl)
	if err != nil {
		t.Fatal(err)
	}
	// Renew at t0+2s with 1.5 s per reply: its two reads end at ≈5 s, its
	// write is sent before the timer fires at 6 s and answered at ≈6.5 s;
	// a timer left to fire deletes the node at ≈7.5 s, before 8 s.
	time.Sleep(time.Until(t0.Add(2 * time.Second)))
	p.SetDelay(1500 * time.Millisecond)
	sent := time.Now()
	_, err = b.Renew(ctx, backend.RenewRequest{Key: "svc/renew-late", Owner: owner, Token: g.Token, TTL: ttl})
	p.SetDelay(0)
	if errors.Is(err, backend.ErrLeaseLost) {
		t.Logf("the renewal came too late for this host's timing (%v): lost, as it must be; nothing to check", time.Since(t0))
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	keptUntil(t, direct, "svc/renew-late", owner, g.Token, sent.Add(ttl-300*time.Millisecond))
}

// TestRetryInFlightWhenTheOldTimerFires: the same for an Acquire retried
// with the holder's nonce, answered "yours" (a renewing write).
func TestRetryInFlightWhenTheOldTimerFires(t *testing.T) {
	t.Parallel()
	p, b, direct := slowReplies(t)
	ctx := context.Background()
	const ttl = 2 * time.Second
	owner := backend.Owner{Instance: "w", Nonce: backend.NewNonce()}
	t0 := time.Now()
	g, err := b.Acquire(ctx, "svc/retry-late", owner, ttl)
	if err != nil {
		t.Fatal(err)
	}
	// Retry at t0+1.5s with 1 s per reply: answered at 2.5 s, after the
	// timer fires at 2 s; a timer left to fire deletes at ≈3 s, before 3.5 s.
	time.Sleep(time.Until(t0.Add(1500 * time.Millisecond)))
	p.SetDelay(time.Second)
	sent := time.Now()
	g2, err := b.Acquire(ctx, "svc/retry-late", owner, ttl)
	p.SetDelay(0)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Token != g.Token {
		t.Fatalf("retry answered token %d, want the grant's %d", g2.Token, g.Token)
	}
	keptUntil(t, direct, "svc/retry-late", owner, g.Token, sent.Add(ttl-300*time.Millisecond))
}
