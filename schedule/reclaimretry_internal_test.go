package schedule

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

// lostReclaimReply applies the first Reclaim and loses its reply, as a
// broken connection after the commit would.
type lostReclaimReply struct {
	backend.Backend
	mu   sync.Mutex
	lost bool
}

func (b *lostReclaimReply) Reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	g, r, err := b.Backend.Reclaim(ctx, req)
	b.mu.Lock()
	lose := err == nil && !b.lost
	b.lost = b.lost || lose
	b.mu.Unlock()
	if lose {
		return backend.Grant{}, backend.Run{}, errors.New("injected: connection reset after commit")
	}
	return g, r, err
}

// TestReclaimWithLostReplyStillRuns: a Reclaim whose reply is lost has
// been applied (a new owner — this instance — and attempt+1). recoverRun
// must retry it with the same nonce ("yours") and run the occurrence, not
// walk away: otherwise the attempt is spent with nobody running it, and
// with MaxAttempts 2 the occurrence is abandoned without its retry ever
// running, while the ledger names this instance as its runner.
func TestReclaimWithLostReplyStillRuns(t *testing.T) {
	const ttl = 200 * time.Millisecond
	mem := memory.New()
	defer mem.Close()
	lb := &lostReclaimReply{Backend: mem}
	s, err := New(lb, WithInstance("a"), WithSweepEvery(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan Run, 1)
	err = s.Register(Job{Name: "crashy", Schedule: "0 0 1 1 *", LeaseTTL: ttl, Crash: CrashRetry, MaxAttempts: 2,
		Func: func(ctx context.Context, r Run) error { ran <- r; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A runner that dies at once: attempt 1, never heartbeated.
	at := backend.Instant(time.Now().Add(-time.Second))
	dead := backend.Owner{Instance: "dead", Nonce: backend.NewNonce()}
	if _, err := mem.Claim(ctx, backend.ClaimRequest{Job: "crashy", ScheduledAt: at, Owner: dead, TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(ctx)
	select {
	case r := <-ran:
		if r.Attempt != 2 {
			t.Errorf("the retry ran as attempt %d, want 2", r.Attempt)
		}
	case <-time.After(20 * ttl):
		run, _ := mem.GetRun(ctx, "crashy", at)
		t.Fatalf("the occurrence's retry never ran: the ledger says state %s, attempt %d, runner %s",
			run.State, run.Attempt, run.Owner.Instance)
	}
}
