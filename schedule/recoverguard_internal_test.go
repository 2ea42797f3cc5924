package schedule

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

// lostAttempt answers every Heartbeat of the given attempt's runner
// ErrLeaseLost (its lease is not kept alive: it expires at its TTL, as
// when its heartbeats cannot reach the backend).
type lostAttempt struct {
	backend.Backend
	token chan uint64 // the token of the run whose heartbeats are refused
}

func (b *lostAttempt) Heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	select {
	case t := <-b.token:
		b.token <- t
		if t == req.Token {
			return fmt.Errorf("%w: refused by the test", backend.ErrLeaseLost)
		}
	default:
	}
	return b.Backend.Heartbeat(ctx, req)
}

// TestRecoveredRunSlowToStopDoesNotBlockRecovery: the "one recovery of an
// occurrence at a time" guard is held by recoverRun, which also executes
// the reclaimed run — so it stays held for the whole run. When that run's
// lease is lost (its context is cancelled) and its function is slow to
// stop, the occurrence's lease expires and, under crash policy retry, it
// must be recovered again (as this scheduler does for a first attempt in
// the same state): here the guard keeps this scheduler from ever
// recovering it while the stale function runs.
func TestRecoveredRunSlowToStopDoesNotBlockRecovery(t *testing.T) {
	const ttl = 300 * time.Millisecond
	mem := memory.New()
	defer mem.Close()
	b := &lostAttempt{Backend: mem, token: make(chan uint64, 1)}
	s, err := New(b, WithInstance("a"), WithSweepEvery(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{}) // the stale function returns when closed
	ran := make(chan Run, 8)
	err = s.Register(Job{Name: "crashy", Schedule: "0 0 1 1 *", LeaseTTL: ttl, Crash: CrashRetry, MaxAttempts: 5,
		Func: func(ctx context.Context, r Run) error {
			ran <- r
			if r.Attempt == 2 {
				b.token <- uint64(r.Token) // its lease is lost from now on
				<-ctx.Done()               // told...
				<-stop                     // ...but slow to stop
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	at := backend.Instant(time.Now().Add(-time.Second))
	dead := backend.Owner{Instance: "dead", Nonce: backend.NewNonce()}
	if _, err := mem.Claim(ctx, backend.ClaimRequest{Job: "crashy", ScheduledAt: at, Owner: dead, TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { close(stop); s.Shutdown(ctx) }()
	want := 2
	deadline := time.After(30 * time.Second) // 100 lease TTLs: far past the attempt 2 lease's expiry
	for want <= 3 {
		select {
		case r := <-ran:
			if r.Attempt != want {
				t.Fatalf("ran attempt %d, want %d", r.Attempt, want)
			}
			want++
		case <-deadline:
			rs, _ := mem.ListRuns(ctx, backend.RunFilter{Job: "crashy"})
			t.Fatalf("attempt %d never ran: the occurrence (%+v) stayed unrecovered while the stale attempt 2's function ran, though its lease was lost and expired", want, rs)
		}
	}
}
