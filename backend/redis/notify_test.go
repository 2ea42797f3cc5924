package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestWaitWakesOnExpiry: no release is published when a lease expires; the
// waiter still wakes at the remaining TTL (timer), and wakes on a release
// made through another Backend (another connection, as another process).
func TestWaitWakesOnExpiryAndRemoteRelease(t *testing.T) {
	srv := testserver.Redis(t)
	a := open(t, srv.Addr())
	other := open(t, srv.Addr(), a.Prefix())
	ctx := context.Background()
	o := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	g, err := a.Acquire(ctx, "w/exp", o, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ch, err := other.Wait(ctx, "w/exp")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up within 10s of a 1s lease expiring")
	}
	if el := time.Since(start); el < 900*time.Millisecond {
		t.Fatalf("woke after %v, before the 1s lease could expire", el)
	}
	if _, err := other.Acquire(ctx, "w/exp", backend.Owner{Instance: "b", Nonce: backend.NewNonce()}, time.Minute); err != nil {
		t.Fatalf("Acquire after expiry: %v", err)
	}
	_ = g

	g2, err := a.Acquire(ctx, "w/rel", o, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ch, err = other.Wait(ctx, "w/rel")
	if err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	if err := a.Release(ctx, "w/rel", o, g2.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Logf("release → waiter woken in %v", time.Since(released))
	case <-time.After(10 * time.Second):
		t.Fatal("release not pushed within 10s")
	}

	// A server restart breaks the subscription: waiters are woken (events
	// may have been lost), and Wait works again once resubscribed.
	g3, err := a.Acquire(ctx, "w/restart", o, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ch, err = other.Wait(ctx, "w/restart")
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal("waiter not woken when the subscription's connection broke")
	}
	_ = g3
	g4, err := a.Acquire(ctx, "w/again", o, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ch, err = other.Wait(wctx, "w/again")
	if err != nil {
		t.Fatalf("Wait after restart: %v", err)
	}
	if err := a.Release(ctx, "w/again", o, g4.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("release after resubscription not pushed")
	}
}

// TestWaitKeyspaceEvents: with notify-keyspace-events Ex the backend also
// listens to expired-key events.
func TestWaitKeyspaceEvents(t *testing.T) {
	srv := testserver.Redis(t, "--notify-keyspace-events", "Ex")
	b := open(t, srv.Addr())
	ctx := context.Background()
	o := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	if _, err := b.Acquire(ctx, "ks/k", o, 1000*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ch, err := b.Wait(ctx, "ks/k")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up on expiry with keyspace events on")
	}
}
