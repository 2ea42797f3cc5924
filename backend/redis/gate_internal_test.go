package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/testserver"
)

// TestGateNotApplied: a request whose context ends while it waits for a
// connection reports ErrNotApplied, changes nothing on the server (the key
// stays free and its token counter does not move), and the Locker reports
// it as "not acquired", not as an unknown outcome.
func TestGateNotApplied(t *testing.T) {
	srv := testserver.Redis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), PoolSize: 2, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	b, err := New(c, WithPrefix("gate:"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if cap(b.gate) != 2 {
		t.Fatalf("gate has %d slots, want the pool size 2", cap(b.gate))
	}
	ctx := context.Background()
	owner := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	g, err := b.Acquire(ctx, "k", owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "k", owner, g.Token); err != nil {
		t.Fatal(err)
	}

	// Occupy every slot, as a crowd of requests in flight would.
	for range cap(b.gate) {
		b.gate <- struct{}{}
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = b.Acquire(short, "k", backend.Owner{Instance: "b", Nonce: backend.NewNonce()}, time.Minute)
	cancel()
	if !errors.Is(err, backend.ErrNotApplied) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with every slot taken: %v, want ErrNotApplied wrapping DeadlineExceeded", err)
	}
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance("c"))
	if err != nil {
		t.Fatal(err)
	}
	short, cancel = context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = lk.Acquire(short, "k")
	cancel()
	if !errors.Is(err, leasehold.ErrNotAcquired) || errors.Is(err, leasehold.ErrIndeterminate) {
		t.Fatalf("Locker.Acquire with every slot taken: %v, want ErrNotAcquired (and not ErrIndeterminate)", err)
	}
	for range cap(b.gate) {
		<-b.gate
	}

	// Nothing was changed: the key is free and the next token follows g's.
	if _, err := b.Get(ctx, "k"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Get after the unsent acquire: %v, want ErrNotFound", err)
	}
	g2, err := b.Acquire(ctx, "k", owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Token != g.Token+1 {
		t.Fatalf("token after the unsent acquires = %d, want %d: an unsent request moved the counter", g2.Token, g.Token+1)
	}
}
