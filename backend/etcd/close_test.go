package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/schedule"
)

// TestCloseDuringAcquireIsIndeterminate (issue 14 item 6): the backend is
// closed while an Acquire was applied by etcd but its reply is held back.
// The outcome cannot be known — the key is granted — so the Locker must
// report ErrIndeterminate, not an ErrClosed that says nothing happened.
func TestCloseDuringAcquireIsIndeterminate(t *testing.T) {
	p, direct, closing := closingPair(t)
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
		l, err := lk.TryAcquire(ctx, key)
		if l != nil {
			_ = l.Release(ctx)
		}
		got <- err
	}()
	closeOnceApplied(t, closing, got, "the acquire", func() error { _, err := direct.Get(ctx, bkey); return err })
	select {
	case err = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("TryAcquire did not return after the backend was closed")
	}
	if !errors.Is(err, leasehold.ErrOutcomeIndeterminate) {
		t.Fatalf("TryAcquire closed in flight: %v, want ErrIndeterminate", err)
	}
}

// closingPair is an etcd server, a backend on it directly, and one on the
// same prefix through a chaos proxy (to hold replies back, then Close).
func closingPair(t *testing.T) (p *chaos.Proxy, direct, closing *etcd.Backend) {
	srv := testserver.Etcd(t)
	p, err := chaos.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	direct = open(t, []string{srv.Addr()})
	return p, direct, open(t, []string{p.Addr()}, direct.Prefix())
}

// TestCloseDuringFinish: the same for Claim.Finish. etcd applies the
// Finish Txn, the proxy holds its reply back, the backend is closed: the
// retry gets ErrClosed, and Finish must not report that plain ErrClosed —
// "nothing happened" — for an outcome that was recorded; it is
// ErrIndeterminate (found by review).
func TestCloseDuringFinish(t *testing.T) {
	p, direct, closing := closingPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	at := backend.Instant(time.Now().Add(-time.Second))
	c, err := schedule.ClaimOccurrence(ctx, closing, "job", at, schedule.ClaimOptions{Instance: "closing", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p.SetDelay(2 * time.Second)
	got := make(chan error, 1)
	go func() { got <- c.Finish(ctx, nil) }()
	closeOnceApplied(t, closing, got, "the Finish", func() error {
		r, err := direct.GetRun(ctx, "job", at)
		if err == nil && r.State != backend.Succeeded {
			err = fmt.Errorf("state %s", r.State)
		}
		return err
	})
	select {
	case err = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("Finish did not return after the backend was closed")
	}
	if err != nil && !errors.Is(err, leasehold.ErrOutcomeIndeterminate) {
		t.Fatalf("Finish closed in flight, its outcome recorded by etcd: %v, want nil or ErrIndeterminate", err)
	}
}

// closeOnceApplied waits until applied reports the request the proxy holds
// the reply of was applied by etcd (nil), failing if the call returned
// first (its answer on got), then closes the backend with the reply still
// in flight.
func closeOnceApplied(t *testing.T, closing *etcd.Backend, got <-chan error, what string, applied func() error) {
	t.Helper()
	var err error
	if !eventually.Within(10*time.Second, func() bool {
		if err = applied(); err == nil {
			return true
		}
		select {
		case err := <-got:
			t.Fatalf("%s returned before etcd applied it: %v", what, err)
		default:
		}
		return false
	}) {
		t.Fatalf("%s did not reach etcd within 10s: %v", what, err)
	}
	if err := closing.Close(); err != nil {
		t.Fatal(err)
	}
}
