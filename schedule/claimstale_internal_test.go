package schedule

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

// unknownThenLongEarly loses attempt 1 of a claim of job "stale" (outcome
// unknown to the scheduler, nothing applied) and refuses the attempts after
// it as too early until span has passed since attempt 1, as a ledger whose
// clock runs behind this host's would.
type unknownThenLongEarly struct {
	backend.Backend
	span time.Duration

	mu    sync.Mutex
	n     int
	first time.Time
}

func (b *unknownThenLongEarly) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	if req.Job != "stale" {
		return b.Backend.Claim(ctx, req)
	}
	b.mu.Lock()
	b.n++
	n := b.n
	if n == 1 {
		b.first = time.Now()
	}
	first := b.first
	b.mu.Unlock()
	switch {
	case n == 1:
		return backend.Grant{}, errors.New("injected: connection reset")
	case time.Since(first) < b.span:
		return backend.Grant{}, fmt.Errorf("injected: %w", backend.ErrOccurrenceTooEarly)
	}
	return b.Backend.Claim(ctx, req)
}

// Heartbeat honours ctx as every networked ledger's client does (a request
// is not sent after its context ended); the memory ledger ignores it.
func (b *unknownThenLongEarly) Heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", backend.ErrNotApplied, err)
	}
	return b.Backend.Heartbeat(ctx, req)
}

// TestClaimAfterUnknownAndLongRefusalRunsLive: a claim won after an early
// attempt with an unknown outcome and a run of "too early" refusals longer
// than the lease must start the job with a live context that heartbeats
// keep alive — not with one already past its deadline because the
// confirming heartbeat was given a deadline counted from that first attempt.
func TestClaimAfterUnknownAndLongRefusalRunsLive(t *testing.T) {
	const ttl = 300 * time.Millisecond
	mem := memory.New()
	defer mem.Close()
	lb := &unknownThenLongEarly{Backend: mem, span: 2 * ttl}
	s, err := New(lb, WithInstance("a"))
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct{ lost error }
	ran := make(chan outcome, 1)
	err = s.Register(Job{Name: "stale", Schedule: "0 0 1 1 *", LeaseTTL: ttl, Crash: CrashRetry,
		Func: func(ctx context.Context, r Run) error {
			var lost error
			select {
			case <-ctx.Done():
				lost = context.Cause(ctx)
			case <-time.After(3 * ttl): // heartbeats keep a live run going
			}
			ran <- outcome{lost}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(ctx)
	go s.occur(s.loopCtx, s.jobs["stale"], backend.Instant(time.Now()))
	select {
	case o := <-ran:
		if o.lost != nil {
			t.Fatalf("the run's context was cancelled (%v): its deadline counted from the first attempt, %v before the claim was won", o.lost, 2*ttl)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the occurrence never ran")
	}
}
