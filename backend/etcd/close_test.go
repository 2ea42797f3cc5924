package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testserver"
)

// TestCloseDuringAcquireIsIndeterminate (issue 14 item 6): the backend is
// closed while an Acquire was applied by etcd but its reply is held back.
// The outcome cannot be known — the key is granted — so the Locker must
// report ErrIndeterminate, not an ErrClosed that says nothing happened.
func TestCloseDuringAcquireIsIndeterminate(t *testing.T) {
	srv := testserver.Etcd(t)
	p, err := chaos.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	direct := open(t, []string{srv.Addr()})
	closing := open(t, []string{p.Addr()}, direct.Prefix())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "svc/closing"
	bkey := "default:lock:" + key
	lk, err := leasehold.NewLocker(closing, leasehold.WithInstance("closing"), leasehold.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Warm the lease pool, so that the Acquire is one Txn whose reply the
	// proxy holds back.
	warm, err := lk.TryAcquire(ctx, "svc/warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.SetDelay(2 * time.Second)
	got := make(chan error, 1)
	go func() {
		t0 := time.Now()
		l, err := lk.TryAcquire(ctx, key)
		t.Logf("TryAcquire took %v: %v", time.Since(t0), err)
		if l != nil {
			_ = l.Release(ctx)
		}
		got <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := direct.Get(ctx, bkey)
		if err == nil {
			break
		}
		select {
		case err := <-got:
			t.Fatalf("TryAcquire returned before its grant reached etcd: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the acquire did not reach etcd within 10s: %+v, %v", l, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := closing.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("TryAcquire did not return after the backend was closed")
	}
	if !errors.Is(err, leasehold.ErrIndeterminate) {
		t.Fatalf("TryAcquire closed in flight: %v, want ErrIndeterminate", err)
	}
}
