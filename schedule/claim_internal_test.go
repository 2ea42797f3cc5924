package schedule

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
)

// lateClaim stages issue #14 item 1 for claims: attempt 1 fails at once
// without reaching the ledger (a broken connection) and is applied late,
// while attempt 2 — refused as too early — is on its way back (delay);
// attempt 3 then answers "yours" with attempt 1's grant. Heartbeats and
// Finish fail without reaching the ledger once drop is called, so the
// lease must expire.
func lateClaim(b backend.Backend, delay time.Duration) (fb *faultbackend.Backend, drop func()) {
	var (
		mu      sync.Mutex
		n       int
		first   backend.ClaimRequest
		dropped bool
	)
	isDropped := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return dropped
	}
	fb = &faultbackend.Backend{Next: b,
		OnClaim: func(ctx context.Context, next faultbackend.ClaimFunc, req backend.ClaimRequest) (backend.Grant, error) {
			if req.Job != "late" { // the schedule version's record
				return next(ctx, req)
			}
			mu.Lock()
			n++
			n := n
			if n == 1 {
				first = req
			}
			first := first
			mu.Unlock()
			switch n {
			case 1:
				return backend.Grant{}, errors.New("injected: connection reset")
			case 2:
				if _, err := next(context.Background(), first); err != nil {
					return backend.Grant{}, fmt.Errorf("applying attempt 1 late: %w", err)
				}
				time.Sleep(delay) // the scenario: the refusal arrives late
				return backend.Grant{}, fmt.Errorf("injected: %w", backend.ErrOccurrenceTooEarly)
			}
			return next(ctx, req)
		},
		OnFinish: func(ctx context.Context, next faultbackend.FinishFunc, req backend.FinishRequest) error {
			if isDropped() {
				return errors.New("injected: finish lost")
			}
			return next(ctx, req)
		},
		OnHeartbeat: func(ctx context.Context, next faultbackend.HeartbeatFunc, req backend.HeartbeatRequest) error {
			if isDropped() {
				return errors.New("injected: heartbeat lost")
			}
			return next(ctx, req)
		}}
	drop = func() { mu.Lock(); dropped = true; mu.Unlock() }
	return fb, drop
}

// TestLateAppliedClaimNeverOutlivesLease: the runner's context must be
// done before another instance can reclaim the occurrence, when an
// attempt refused as too early hid an earlier one that was applied late.
//
// It runs in a synctest bubble: the refusal that arrives 700 ms late
// (within the 1 s lease) and the lease's expiry are virtual time.
func TestLateAppliedClaimNeverOutlivesLease(t *testing.T) {
	synctest.Test(t, lateAppliedClaimNeverOutlivesLease)
}

// lateAppliedClaimNeverOutlivesLease is TestLateAppliedClaimNeverOutlivesLease
// inside its bubble.
func lateAppliedClaimNeverOutlivesLease(t *testing.T) {
	const ttl = time.Second
	mem := memory.New()
	defer mem.Close()
	lb, drop := lateClaim(mem, ttl*7/10)
	s, err := New(lb, WithInstance("a"))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan context.Context, 1)
	done := make(chan struct{})
	err = s.Register(Job{Name: "late", Schedule: "0 0 1 1 *", LeaseTTL: ttl, Crash: CrashRetry,
		Func: func(ctx context.Context, r Run) error {
			started <- ctx
			<-ctx.Done()
			close(done)
			return ctx.Err()
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
	at := backend.Instant(time.Now())
	// Tracked, so Shutdown waits for the run's Finish retries to end
	// (nothing may outlive the bubble).
	s.runs.Add(1)
	go func() { defer s.runs.Done(); s.occur(s.loopCtx, s.jobs["late"], at) }()

	var jobCtx context.Context
	select {
	case jobCtx = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the occurrence never ran")
	}
	drop()
	other := backend.Owner{Instance: "b", Nonce: backend.NewNonce()}
	deadline := time.Now().Add(20 * ttl)
	for {
		g, _, err := mem.Reclaim(ctx, backend.ClaimRequest{Job: "late", ScheduledAt: at, Owner: other, TTL: ttl})
		if err == nil {
			if jobCtx.Err() == nil {
				t.Fatalf("another instance reclaimed the occurrence (token %d) while the first runner's context was live: its deadline outlived the ledger's lease", g.Token)
			}
			<-done
			return
		}
		if !errors.Is(err, backend.ErrLeaseNotExpired) {
			t.Fatalf("Reclaim: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runner's lease never expired after its heartbeats stopped")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// unknownThenLongEarly loses attempt 1 of a claim of job "stale" (outcome
// unknown to the scheduler, nothing applied) and refuses the attempts after
// it as too early until span has passed since attempt 1, as a ledger whose
// clock runs behind this host's would.
func unknownThenLongEarly(b backend.Backend, span time.Duration) *faultbackend.Backend {
	var (
		mu      sync.Mutex
		calls   int
		firstAt time.Time
	)
	return &faultbackend.Backend{
		Next: b,
		OnClaim: func(ctx context.Context, next faultbackend.ClaimFunc, req backend.ClaimRequest) (backend.Grant, error) {
			if req.Job != "stale" {
				return next(ctx, req)
			}
			mu.Lock()
			calls++
			n := calls
			if n == 1 {
				firstAt = time.Now()
			}
			first := firstAt
			mu.Unlock()
			switch {
			case n == 1:
				return backend.Grant{}, errors.New("injected: connection reset")
			case time.Since(first) < span:
				return backend.Grant{}, fmt.Errorf("injected: %w", backend.ErrOccurrenceTooEarly)
			}
			return next(ctx, req)
		},
		// Heartbeat honours ctx as every networked ledger's client does (a
		// request is not sent after its context ended); the memory ledger
		// ignores it.
		OnHeartbeat: func(ctx context.Context, next faultbackend.HeartbeatFunc, req backend.HeartbeatRequest) error {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("%w: %w", backend.ErrNotApplied, err)
			}
			return next(ctx, req)
		},
	}
}

// TestClaimAfterUnknownAndLongRefusalRunsLive: a claim won after an early
// attempt with an unknown outcome and a run of "too early" refusals longer
// than the lease must start the job with a live context that heartbeats
// keep alive — not with one already past its deadline because the
// confirming heartbeat was given a deadline counted from that first attempt.
//
// It runs in a synctest bubble: the 600 ms of refusals (twice the lease)
// and the 900 ms the job then lives on heartbeats are virtual time.
func TestClaimAfterUnknownAndLongRefusalRunsLive(t *testing.T) {
	synctest.Test(t, claimAfterUnknownAndLongRefusalRunsLive)
}

// claimAfterUnknownAndLongRefusalRunsLive is TestClaimAfterUnknownAndLongRefusalRunsLive
// inside its bubble.
func claimAfterUnknownAndLongRefusalRunsLive(t *testing.T) {
	const ttl = 300 * time.Millisecond
	mem := memory.New()
	defer mem.Close()
	lb := unknownThenLongEarly(mem, 2*ttl)
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
	s.runs.Add(1) // tracked: Shutdown waits for it, so nothing outlives the bubble
	go func() { defer s.runs.Done(); s.occur(s.loopCtx, s.jobs["stale"], backend.Instant(time.Now())) }()
	select {
	case o := <-ran:
		if o.lost != nil {
			t.Fatalf("the run's context was cancelled (%v): its deadline counted from the first attempt, %v before the claim was won", o.lost, 2*ttl)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the occurrence never ran")
	}
}

// slowClaimReply applies Claim at once and delivers its reply after delay.
func slowClaimReply(b backend.Backend, delay time.Duration) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnClaim: func(ctx context.Context, next faultbackend.ClaimFunc, req backend.ClaimRequest) (backend.Grant, error) {
			g, err := next(ctx, req)
			if req.Job == "slow" {
				time.Sleep(delay)
			}
			return g, err
		},
	}
}

// liveAtStart reports, from the job's first instant, whether the backend
// still held the run's lease for it: a job must never start on a claim the
// backend may already have expired (and may have granted again).
func liveAtStart(mem *memory.Backend, ch chan<- error) Func {
	return func(ctx context.Context, r Run) error {
		got, err := mem.GetRun(context.Background(), r.Job, r.ScheduledAt)
		switch {
		case err != nil:
			ch <- err
		case got.State != backend.Running || got.Expired || got.Token != uint64(r.Token):
			ch <- fmt.Errorf("the job started while the ledger says %s, expired %v, token %d (ours %d)", got.State, got.Expired, got.Token, r.Token)
		default:
			ch <- nil
		}
		return nil
	}
}

// TestSlowClaimReplyNeverRunsExpired: a claim whose reply arrives after the
// runner's deadline (counted from the send time) is confirmed by a
// heartbeat before the job starts, or not run: the backend may already
// have expired it.
//
// Each case runs in its own synctest bubble (t.Run cannot be called in
// one), over a memory ledger of its own: the reply 600 ms late, twice the
// 300 ms lease, is virtual time.
func TestSlowClaimReplyNeverRunsExpired(t *testing.T) {
	const ttl = 300 * time.Millisecond
	// bubble runs f in a synctest bubble with a memory ledger of its own.
	bubble := func(f func(t *testing.T, mem *memory.Backend, ctx context.Context)) func(t *testing.T) {
		return func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memory.New()
				t.Cleanup(func() { mem.Close() }) // after the schedulers stop
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				f(t, mem, ctx)
			})
		}
	}

	t.Run("Scheduler", bubble(func(t *testing.T, mem *memory.Backend, _ context.Context) {
		started := make(chan error, 10)
		startJob(t, slowClaimReply(mem, 2*ttl), "a", Job{Name: "slow", Schedule: "@every 1s", LeaseTTL: ttl, Func: liveAtStart(mem, started)})
		select {
		case err := <-started:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the job never ran")
		}
	}))
	t.Run("ClaimOccurrence", bubble(func(t *testing.T, mem *memory.Backend, ctx context.Context) {
		at := backend.Instant(time.Now().Add(-time.Second))
		c, err := ClaimOccurrence(ctx, slowClaimReply(mem, 2*ttl), "slow", at, ClaimOptions{Instance: "a", TTL: ttl})
		// The claim expired before the reply: the confirming heartbeat finds
		// it lost, so the only right answer is a refusal.
		if !errors.Is(err, leasehold.ErrOutcomeIndeterminate) {
			if c != nil {
				c.Finish(ctx, nil)
			}
			t.Fatalf("ClaimOccurrence with its reply past the lease: claim %v, %v; want ErrIndeterminate", c != nil, err)
		}
	}))
}
