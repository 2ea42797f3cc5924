package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testserver"
	"github.com/leasehold/leasehold/schedule"
)

// TestCloseDuringFinish: TestCloseDuringAcquireIsIndeterminate for
// Claim.Finish. etcd applies the Finish Txn, the proxy holds its reply
// back, the backend is closed: wrap() now (f0c412d) reports the cut-off
// Txn as an unknown outcome, finishRun retries, the retry gets ErrClosed
// from check(), and finishRun returns that plain ErrClosed — "nothing
// happened" — for an outcome that was recorded (no ledger read, no
// ErrIndeterminate).
func TestCloseDuringFinish(t *testing.T) {
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
	at := backend.Instant(time.Now().Add(-time.Second))
	c, err := schedule.ClaimOccurrence(ctx, closing, "job", at, schedule.ClaimOptions{Instance: "closing", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p.SetDelay(2 * time.Second)
	got := make(chan error, 1)
	go func() { got <- c.Finish(ctx, nil) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := direct.GetRun(ctx, "job", at)
		if err == nil && r.State == backend.Succeeded {
			break
		}
		select {
		case err := <-got:
			t.Fatalf("Finish returned before its Txn reached etcd: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Finish did not reach etcd within 10s: %+v, %v", r, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := closing.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("Finish did not return after the backend was closed")
	}
	t.Logf("Finish: %v", err)
	if err != nil && errors.Is(err, backend.ErrClosed) && !errors.Is(err, leasehold.ErrIndeterminate) {
		t.Fatalf("Finish closed in flight, its outcome recorded by etcd, returned a plain ErrClosed: %v", err)
	}
}
