package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// TestWaitSeesReleaseBeforeWait: a release between a waiter's failed
// Acquire and its Wait is not missed (the holder is read after LISTEN).
func TestWaitSeesReleaseBeforeWait(t *testing.T) {
	b := openTest(t)
	defer b.Close()
	ctx := context.Background()
	a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	w := backend.Owner{Instance: "w", Nonce: backend.NewNonce()}
	for i := range 20 {
		g, err := b.Acquire(ctx, "n/k", a, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Acquire(ctx, "n/k", w, time.Minute); !errors.Is(err, backend.ErrHeld) {
			t.Fatalf("round %d: %v, want ErrHeld", i, err)
		}
		if err := b.Release(ctx, "n/k", a, g.Token); err != nil { // before Wait
			t.Fatal(err)
		}
		ch, err := b.Wait(ctx, "n/k")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: a release before Wait was missed", i)
		}
	}
}

// TestWaitFiresOnExpiryAndCancel: the channel closes when the lease expires
// by the server's clock, and when the waiter's context ends.
func TestWaitFiresOnExpiryAndCancel(t *testing.T) {
	b := openTest(t)
	defer b.Close()
	ctx := context.Background()
	a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	if _, err := b.Acquire(ctx, "n/exp", a, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ch, err := b.Wait(ctx, "n/exp")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up at expiry")
	}
	if _, err := b.Get(ctx, "n/exp"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("woken at expiry but the server still sees a lease: %v", err)
	}
	if _, err := b.Acquire(ctx, "n/held", a, time.Minute); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	ch, err = b.Wait(cctx, "n/held")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up when the context ended")
	}
}
