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
	"github.com/leasehold/leasehold/internal/testserver"
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
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := holderB.Get(ctx, "default:lock:svc/expire")
		if err == nil && holderB.Conn().SessionID() != oldSession {
			if got.Token != uint64(next.Token()) {
				t.Fatalf("after reconnecting the old holder reads token %d, want the next holder's %d", got.Token, next.Token())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("old holder's client did not come back with a new session: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
