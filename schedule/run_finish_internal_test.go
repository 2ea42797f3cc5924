package schedule

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

// lostFinishReply applies the first Finish and then reports a broken
// connection (its reply is lost); GetRun fails (getRunFail > 0: that many
// times with a transient error) or blocks until its ctx ends (hangGetRun).
type lostFinishReply struct {
	backend.Backend
	mu          sync.Mutex
	finishes    int
	getRunFail  int
	hangGetRun  bool
	hbApplyFail bool // Heartbeat is applied, but its reply is lost
	keepFinish  bool // Finish replies are not lost
}

func (b *lostFinishReply) Finish(ctx context.Context, req backend.FinishRequest) error {
	b.mu.Lock()
	b.finishes++
	n, keep := b.finishes, b.keepFinish
	b.mu.Unlock()
	if err := ctx.Err(); err != nil { // a network backend sends nothing on a dead ctx
		return err
	}
	err := b.Backend.Finish(ctx, req)
	if n == 1 && err == nil && !keep {
		return errors.New("injected: connection reset (the Finish was applied)")
	}
	return err
}

func (b *lostFinishReply) GetRun(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	b.mu.Lock()
	hang := b.hangGetRun
	fail := b.getRunFail > 0
	if fail {
		b.getRunFail--
	}
	b.mu.Unlock()
	if hang {
		<-ctx.Done() // a backend that does not answer (a partition), bounded only by ctx
		return backend.Run{}, ctx.Err()
	}
	if fail {
		return backend.Run{}, errors.New("injected: connection refused")
	}
	return b.Backend.GetRun(ctx, job, at)
}

func (b *lostFinishReply) Heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	b.mu.Lock()
	lose := b.hbApplyFail
	b.mu.Unlock()
	err := b.Backend.Heartbeat(ctx, req)
	if lose && err == nil {
		return errors.New("injected: reply lost (the heartbeat was applied)")
	}
	return err
}

func (b *lostFinishReply) Finishes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.finishes
}

// TestClaimFinishAppliedReportedLost: the first Finish is applied and
// its reply lost; the retry is (rightly) refused with ErrLeaseLost because
// the run is finished; finishRun reads the ledger to tell "finished by us"
// — but a single transient GetRun error makes it report ErrLeaseLost for a
// run whose outcome this call recorded. Claim.Finish's doc: "ErrLeaseLost if
// the claim was lost meanwhile"; the Scheduler would emit EventRunLost and
// call OnLost for a run that finished fine.
func TestClaimFinishAppliedReportedLost(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	fb := &lostFinishReply{Backend: mem, getRunFail: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	at := backend.Instant(time.Now().Add(-time.Second))
	c, err := ClaimOccurrence(ctx, fb, "once", at, ClaimOptions{Instance: "a", TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ferr := c.Finish(ctx, nil)
	r, gerr := mem.GetRun(ctx, "once", at)
	if gerr != nil {
		t.Fatal(gerr)
	}
	t.Logf("ledger: state %s owner %v token %d; Finish returned %v", r.State, r.Owner, r.Token, ferr)
	if r.State == backend.Succeeded && r.Token == c.token && errors.Is(ferr, backend.ErrLeaseLost) {
		t.Fatalf("the outcome was recorded by this claim, yet Finish reports the claim lost: %v", ferr)
	}
}

// TestFinishRunBoundedByLease: the Scheduler calls finishRun with
// context.Background(); after an applied-but-unanswered Finish, finishRun
// reads the ledger with that unbounded ctx. A backend that does not answer
// (a partition) then keeps finishRun — and the Scheduler's execute, holding
// an inflight slot — blocked far past the run's lease deadline, though the
// doc promises a retry "until the run's lease deadline (until)".
func TestFinishRunBoundedByLease(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	fb := &lostFinishReply{Backend: mem, hangGetRun: true}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	at := backend.Instant(time.Now().Add(-time.Second))
	owner := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	const ttl = 2 * time.Second
	g, err := mem.Claim(ctx, backend.ClaimRequest{Job: "once", ScheduledAt: at, Owner: owner, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	until := sent.Add(defaultLease.span(g.TTL))
	done := make(chan error, 1)
	go func() {
		// exactly what execute does
		done <- finishRun(context.Background(), fb, "once", at, owner, g.Token, backend.Outcome{State: backend.Succeeded}, until, g.TTL)
	}()
	limit := time.Until(until) + 3*time.Second
	select {
	case err := <-done:
		t.Logf("finishRun returned %v", err)
	case <-time.After(limit):
		t.Fatalf("finishRun still blocked %v after it started, %v past the run's lease deadline (GetRun with an unbounded ctx)", limit.Round(time.Millisecond), 3*time.Second)
	}
}

// TestClaimFinishAfterUnconfirmedHeartbeats: heartbeats reach the
// ledger (the lease stays live there) but their replies are lost, so the
// claim's local deadline passes and its Context is cancelled with
// ErrLeaseLost. Finish is then called while the ledger still holds the
// lease for this owner: finishRun's first attempt already has a deadline in
// the past, so no Finish is ever sent; the run stays "running" (a crash, to
// the crash policy) and Finish returns an error that is neither nil nor
// ErrLeaseLost (Claim.Finish's doc: "ErrLeaseLost if the claim was lost").
// Before c92f4a6 Finish was sent and recorded the outcome.
func TestClaimFinishAfterUnconfirmedHeartbeats(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	fb := &lostFinishReply{Backend: mem, hbApplyFail: true, keepFinish: true}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	at := backend.Instant(time.Now().Add(-time.Second))
	const ttl = 1500 * time.Millisecond
	c, err := ClaimOccurrence(ctx, fb, "once", at, ClaimOptions{Instance: "a", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Context().Done():
	case <-time.After(5 * ttl):
		t.Fatal("the claim's context was never cancelled")
	}
	if !errors.Is(context.Cause(c.Context()), leasehold.ErrLeaseLost) {
		t.Fatalf("cause %v", context.Cause(c.Context()))
	}
	r, err := mem.GetRun(ctx, "once", at)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ledger before Finish: state %s expired=%v", r.State, r.Expired)
	ferr := c.Finish(ctx, nil)
	r, _ = mem.GetRun(ctx, "once", at)
	t.Logf("Finish: %v; Finish attempts (dead ctx): %d; ledger after: state %s expired=%v", ferr, fb.Finishes(), r.State, r.Expired)
	if r.State == backend.Running && !r.Expired && ferr != nil && !errors.Is(ferr, backend.ErrLeaseLost) {
		t.Fatalf("the ledger still held the run's lease for this owner, yet Finish was tried %d time(s), each with a deadline already past (nothing sent), and returned %v (neither recorded nor ErrLeaseLost)", fb.Finishes(), ferr)
	}
}
