package schedule

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
)

// TestLeaseDeadlineFollowsHeartbeats: Run.LeaseDeadline starts at the
// claim's deadline, and each confirmed heartbeat moves it later and closes
// the channel it returned — what a command's supervisor is told.
//
// It runs in a synctest bubble: the heartbeats every TTL/3 and the
// 30 s it waits for three of them are virtual time.
func TestLeaseDeadlineFollowsHeartbeats(t *testing.T) {
	synctest.Test(t, leaseDeadlineFollowsHeartbeats)
}

// leaseDeadlineFollowsHeartbeats is TestLeaseDeadlineFollowsHeartbeats
// inside its bubble.
func leaseDeadlineFollowsHeartbeats(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	s, err := New(mem, WithInstance("a"))
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 600 * time.Millisecond
	type moved struct{ before, after time.Time }
	got := make(chan []moved, 1)
	if err := s.Register(Job{Name: "follow", Schedule: "0 0 1 1 *", LeaseTTL: ttl,
		Func: func(ctx context.Context, r Run) error {
			var ms []moved
			d, ch := r.LeaseDeadline()
			if d.IsZero() || ch == nil || time.Until(d) > ttl {
				t.Errorf("first deadline %v (in %v), channel %v; want one within the TTL", d, time.Until(d), ch)
			}
			for len(ms) < 3 {
				select {
				case <-ch:
				case <-time.After(30 * time.Second):
					got <- ms
					return nil
				}
				var nd time.Time
				nd, ch = r.LeaseDeadline()
				ms = append(ms, moved{d, nd})
				d = nd
			}
			got <- ms
			return nil
		}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	s.runs.Add(1) // tracked: Shutdown waits for it, so nothing outlives the bubble
	go func() { defer s.runs.Done(); s.occur(s.loopCtx, s.jobs["follow"], backend.Instant(time.Now())) }()
	ms := <-got
	if len(ms) < 3 {
		t.Fatalf("the deadline moved %d times in 30 s; want 3 (heartbeats every %v)", len(ms), ttl/3)
	}
	for i, m := range ms {
		if !m.after.After(m.before) {
			t.Fatalf("move %d: %v → %v; want later", i, m.before, m.after)
		}
	}
}

// stalledHeartbeats is a ledger whose heartbeats never get an answer (a
// partition from the runner's side): the lease runs out.
func stalledHeartbeats(b backend.Backend) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnHeartbeat: func(ctx context.Context, _ faultbackend.HeartbeatFunc, _ backend.HeartbeatRequest) error {
			<-ctx.Done()
			return ctx.Err()
		},
	}
}

// TestLeaseLostAfterTimeout: a job still stopping after its timeout ended
// its context learns through Run.LeaseLost that its lease ran out — the
// moment it must be gone, since another instance may now run the
// occurrence.
//
// It runs in a synctest bubble: the 50 ms timeout and the 600 ms lease
// whose end LeaseLost must precede are virtual time, so the bound is
// exact and load cannot move it.
func TestLeaseLostAfterTimeout(t *testing.T) {
	synctest.Test(t, leaseLostAfterTimeout)
}

// leaseLostAfterTimeout is TestLeaseLostAfterTimeout
// inside its bubble.
func leaseLostAfterTimeout(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	type seen struct {
		cause    error
		lost     bool
		lostLate time.Duration // after the claim's lease TTL, by this host's clock
	}
	got := make(chan seen, 1)
	const ttl = 600 * time.Millisecond
	s := startJob(t, stalledHeartbeats(mem), "a", Job{Name: "stopping", Schedule: "0 0 1 1 *", LeaseTTL: ttl, Timeout: 50 * time.Millisecond,
		Func: func(ctx context.Context, r Run) error {
			start := time.Now()
			<-ctx.Done()
			cause := context.Cause(ctx)
			select {
			case <-r.LeaseLost():
				got <- seen{cause: cause, lost: true, lostLate: time.Since(start) - ttl}
			case <-time.After(20 * time.Second):
				got <- seen{cause: cause}
			}
			return cause
		}})
	at := backend.Instant(time.Now())
	s.runs.Add(1) // tracked: Shutdown waits for it, so nothing outlives the bubble
	go func() { defer s.runs.Done(); s.occur(s.loopCtx, s.jobs["stopping"], at) }()
	g := <-got
	if !errors.Is(g.cause, ErrJobTimeout) || !g.lost {
		t.Fatalf("context ended by %v, lease lost seen: %v; want the timeout, then LeaseLost closed", g.cause, g.lost)
	}
	if g.lostLate >= 0 {
		t.Fatalf("LeaseLost closed %v after the lease's TTL from the job's start: it must close before the backend can expire the lease", g.lostLate)
	}
}

// heartbeatLog is what unreachableHeartbeats records: when the claim was
// sent, and the deadline of each heartbeat's context.
type heartbeatLog struct {
	mu        sync.Mutex
	claimSent time.Time
	deadlines []time.Time
}

// unreachableHeartbeats is a ledger whose heartbeats fail (not refused:
// unreachable), recording into log.
func unreachableHeartbeats(b backend.Backend, log *heartbeatLog) *faultbackend.Backend {
	return &faultbackend.Backend{Next: b,
		OnClaim: func(ctx context.Context, next faultbackend.ClaimFunc, req backend.ClaimRequest) (backend.Grant, error) {
			log.mu.Lock()
			log.claimSent = time.Now()
			log.mu.Unlock()
			return next(ctx, req)
		},
		OnHeartbeat: func(ctx context.Context, _ faultbackend.HeartbeatFunc, _ backend.HeartbeatRequest) error {
			d, _ := ctx.Deadline()
			log.mu.Lock()
			log.deadlines = append(log.deadlines, d)
			log.mu.Unlock()
			return errors.New("connection refused")
		}}
}

// TestRunDeadlineHonoursDriftAndMargin: a run's deadline is the
// Scheduler's WithDrift/WithMargin deadline, the one locks use — not a
// hard-coded one. Heartbeats are cut at that deadline (the default timing
// would let them run to the next heartbeat, later), and the run learns its
// lease is lost.
//
// It runs in a synctest bubble: the 1.4 s deadline the heartbeats must
// end by is virtual time.
func TestRunDeadlineHonoursDriftAndMargin(t *testing.T) {
	synctest.Test(t, runDeadlineHonoursDriftAndMargin)
}

// runDeadlineHonoursDriftAndMargin is TestRunDeadlineHonoursDriftAndMargin
// inside its bubble.
func runDeadlineHonoursDriftAndMargin(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	var hl heartbeatLog
	b := unreachableHeartbeats(mem, &hl)
	const (
		ttl    = 3 * time.Second
		drift  = 0.2
		margin = time.Second
	)
	span := time.Duration(float64(ttl)*(1-drift)) - margin // 1.4 s; the default timing gives 2.82 s
	s, err := New(b, WithInstance("a"), WithDrift(drift), WithMargin(margin))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	if err := s.Register(Job{Name: "drifting", Schedule: "0 0 1 1 *", LeaseTTL: ttl,
		Func: func(ctx context.Context, r Run) error {
			// LeaseLost closes just before the context is cancelled.
			select {
			case <-r.LeaseLost():
				<-ctx.Done()
			case <-time.After(30 * time.Second):
			}
			got <- context.Cause(ctx)
			return nil
		}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	s.runs.Add(1) // tracked: Shutdown waits for it, so nothing outlives the bubble
	go func() { defer s.runs.Done(); s.occur(s.loopCtx, s.jobs["drifting"], backend.Instant(time.Now())) }()
	cause := <-got
	if !errors.Is(cause, leasehold.ErrLeaseLost) {
		t.Fatalf("the run's context ended with %v, want ErrLeaseLost", cause)
	}
	hl.mu.Lock()
	defer hl.mu.Unlock()
	if len(hl.deadlines) == 0 {
		t.Fatal("no heartbeat was sent before the deadline")
	}
	limit := hl.claimSent.Add(span)
	for i, d := range hl.deadlines {
		if d.IsZero() || d.After(limit) {
			t.Fatalf("heartbeat %d may run until %v, past the run's deadline %v (claim sent + TTL × (1 − %v) − %v)", i, d, limit, drift, margin)
		}
	}
}

func TestLeaseTimingIsValidated(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{leasehold.WithDrift(0.5), "WithDrift(0.5)"},
		{leasehold.WithDrift(-0.1), "WithDrift(-0.1)"},
		{leasehold.WithMargin(-time.Second), "WithMargin(-1s)"},
	} {
		_, err := New(mem, tc.opt)
		if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New = %v, want ErrInvalid naming %q", err, tc.want)
		}
	}
	// A margin that leaves a job's lease no room for a heartbeat (every
	// TTL/3) before the deadline is refused at Register, naming the job.
	s, err := New(mem, leasehold.WithMargin(700*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Register(Job{Name: "tight", Schedule: "* * * * *", LeaseTTL: time.Second, Func: func(context.Context, Run) error { return nil }})
	if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), `"tight"`) || !strings.Contains(err.Error(), "lease ttl 1s") {
		t.Fatalf("Register = %v, want ErrInvalid naming the job and its lease ttl", err)
	}
	// As every other invalid field of a job: a *FieldError naming it (the
	// daemon maps it to its config key).
	if fe := (*FieldError)(nil); !errors.As(err, &fe) || fe.Field != "LeaseTTL" {
		t.Fatalf("Register = %v (%T), want a *FieldError for LeaseTTL", err, err)
	}
	if err := s.Register(Job{Name: "roomy", Schedule: "* * * * *", LeaseTTL: 10 * time.Second, Func: func(context.Context, Run) error { return nil }}); err != nil {
		t.Fatalf("a lease with room is refused: %v", err)
	}
}

// TestTimedOutJobNeverRunsBesideItself (issue 15 item 2): a job that
// ignores its context after its timeout is still running, so its lease
// must be held until its function has returned. The heartbeats stopped at
// the timeout; another instance reclaimed the occurrence once the lease
// expired and ran attempt 2 beside attempt 1.
//
// It runs in a synctest bubble: the 100 ms timeout, the 300 ms lease the
// job outlives by 6× and the sweeps that would reclaim it are virtual time.
func TestTimedOutJobNeverRunsBesideItself(t *testing.T) {
	synctest.Test(t, timedOutJobNeverRunsBesideItself)
}

// timedOutJobNeverRunsBesideItself is TestTimedOutJobNeverRunsBesideItself
// inside its bubble.
func timedOutJobNeverRunsBesideItself(t *testing.T) {
	const ttl = 300 * time.Millisecond
	mem := memory.New()
	t.Cleanup(func() { mem.Close() }) // after the schedulers stop
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		mu               sync.Mutex
		running, overlap int
		attempts         []int
	)
	returned := make(chan struct{}, 10)
	job := func(ctx context.Context, r Run) error {
		mu.Lock()
		running++
		if running > 1 {
			overlap++
		}
		attempts = append(attempts, r.Attempt)
		mu.Unlock()
		defer func() {
			mu.Lock()
			running--
			mu.Unlock()
			returned <- struct{}{}
		}()
		<-ctx.Done()        // the timeout
		time.Sleep(6 * ttl) // ... ignored for twice the lease
		return context.Cause(ctx)
	}
	var scheds []*Scheduler
	for _, name := range []string{"a", "b"} {
		scheds = append(scheds, startJob(t, mem, name, Job{Name: "slow", Schedule: "0 0 1 1 *", LeaseTTL: ttl,
			Timeout: 100 * time.Millisecond, Crash: CrashRetry, MaxAttempts: 3, Func: job}))
	}
	at := backend.Instant(time.Now())
	scheds[0].runs.Add(1) // tracked: Shutdown waits for it, so nothing outlives the bubble
	go func() { defer scheds[0].runs.Done(); scheds[0].occur(scheds[0].loopCtx, scheds[0].jobs["slow"], at) }()
	select {
	case <-returned:
	case <-time.After(20 * time.Second):
		t.Fatal("the job never returned")
	}
	// Give a reclaim every chance it would have had: the sweep runs every
	// 20 ms, and attempt 1's lease (if still heartbeated) ends 300 ms after
	// it returned; wait until the ledger settles.
	var (
		r   backend.Run
		err error
	)
	if !eventually.Within(10*time.Second, func() bool {
		r, err = mem.GetRun(ctx, "slow", at)
		return err == nil && r.State.Finished()
	}) {
		t.Fatalf("the occurrence never finished: %+v, %v", r, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if overlap > 0 || len(attempts) > 1 {
		t.Fatalf("attempts %v ran, %d of them beside another: the lease lapsed while attempt 1 still ran", attempts, overlap)
	}
	if r, _ := mem.GetRun(ctx, "slow", at); r.State != backend.Failed || r.Attempt != 1 {
		t.Fatalf("ledger: %s attempt %d, want failed (timeout) attempt 1", r.State, r.Attempt)
	}
}

// openSQLite opens a SQLite ledger in the test's temp dir, closed after
// the schedulers the test starts (t.Cleanup runs last-in first-out).
func openSQLite(t *testing.T) backend.Backend {
	t.Helper()
	b, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// waitRun polls the ledger until the occurrence's record satisfies done,
// and returns it; the test fails after within.
func waitRun(t *testing.T, l backend.Ledger, job string, at time.Time, within time.Duration, what string, done func(backend.Run) bool) backend.Run {
	t.Helper()
	var r backend.Run
	var err error
	if !eventually.Within(within, func() bool {
		r, err = l.GetRun(context.Background(), job, at)
		return err == nil && done(r)
	}) {
		t.Fatalf("%s: not true within %v: last record %+v, %v", what, within, r, err)
	}
	return r
}

// TestTimeoutRecordedAsFailedTimeout (issue 15 item 2): a run stopped by
// its Timeout is recorded as failed with an error that says it timed out —
// also when the job returns its context's ctx.Err() ("context canceled"),
// which said nothing of a timeout — and never as a crash (abandoned or
// reclaimed). A job that returns nil after its timeout did its work: it is
// recorded as succeeded (retrying it would repeat the effect).
func TestTimeoutRecordedAsFailedTimeout(t *testing.T) {
	for _, c := range []struct {
		name      string
		ret       func(ctx context.Context) error
		wantState backend.RunState
	}{
		{"returns ctx.Err()", func(ctx context.Context) error { return ctx.Err() }, backend.Failed},
		{"returns the cause", func(ctx context.Context) error { return context.Cause(ctx) }, backend.Failed},
		{"returns its own error", func(ctx context.Context) error { return errCustom }, backend.Failed},
		{"returns nil", func(ctx context.Context) error { return nil }, backend.Succeeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := openSQLite(t)
			s := startJob(t, b, "a", Job{Name: "t", Schedule: "0 0 1 1 *", LeaseTTL: 2 * time.Second, Timeout: 50 * time.Millisecond,
				Crash: CrashSkip, Func: func(ctx context.Context, r Run) error { <-ctx.Done(); return c.ret(ctx) }})
			at := backend.Instant(time.Now())
			s.occur(s.loopCtx, s.jobs["t"], at)
			r := waitRun(t, b, "t", at, 10*time.Second, "the run finished", func(r backend.Run) bool { return r.State.Finished() })
			if r.State != c.wantState || r.Attempt != 1 {
				t.Fatalf("ledger: %s attempt %d (error %q), want %s attempt 1", r.State, r.Attempt, r.Error, c.wantState)
			}
			if c.wantState == backend.Failed && !strings.Contains(r.Error, "timed out after 50ms") {
				t.Fatalf("recorded error %q does not say the run timed out after its 50ms timeout", r.Error)
			}
			if c.name == "returns its own error" && !strings.Contains(r.Error, errCustom.Error()) {
				t.Fatalf("recorded error %q lost the job's own error %q", r.Error, errCustom)
			}
		})
	}
}

var errCustom = customError("flush interrupted")

type customError string

func (e customError) Error() string { return string(e) }
