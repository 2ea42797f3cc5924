package schedule

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
)

// lostReclaimReply applies the first Reclaim and loses its reply, as a
// broken connection after the commit would.
func lostReclaimReply(b backend.Backend) *faultbackend.Backend {
	var (
		mu   sync.Mutex
		lost bool
	)
	return &faultbackend.Backend{
		Next: b,
		OnReclaim: func(ctx context.Context, next faultbackend.ReclaimFunc, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
			g, r, err := next(ctx, req)
			mu.Lock()
			lose := err == nil && !lost
			lost = lost || lose
			mu.Unlock()
			if lose {
				return backend.Grant{}, backend.Run{}, errors.New("injected: connection reset after commit")
			}
			return g, r, err
		},
	}
}

// TestReclaimWithLostReplyStillRuns: a Reclaim whose reply is lost has
// been applied (a new owner — this instance — and attempt+1). recoverRun
// must retry it with the same nonce ("yours") and run the occurrence, not
// walk away: otherwise the attempt is spent with nobody running it, and
// with MaxAttempts 2 the occurrence is abandoned without its retry ever
// running, while the ledger names this instance as its runner.
//
// It runs in a synctest bubble: the dead runner's 200 ms lease expiring
// and the 20 TTLs the retry gets are virtual time.
func TestReclaimWithLostReplyStillRuns(t *testing.T) {
	synctest.Test(t, reclaimWithLostReplyStillRuns)
}

// reclaimWithLostReplyStillRuns is TestReclaimWithLostReplyStillRuns
// inside its bubble.
func reclaimWithLostReplyStillRuns(t *testing.T) {
	const ttl = 200 * time.Millisecond
	mem := memory.New()
	defer mem.Close()
	lb := lostReclaimReply(mem)
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

// staleListing answers every ListRuns with its runs as they were at
// attempt 1: a sweep's listing read before another instance reclaimed the
// occurrence (and that runner died too).
func staleListing(b backend.Backend) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnListRuns: func(ctx context.Context, next faultbackend.ListRunsFunc, f backend.RunFilter) ([]backend.Run, error) {
			runs, err := next(ctx, f)
			for i := range runs {
				runs[i].Attempt = 1
			}
			return runs, err
		},
	}
}

// TestStaleSweepDoesNotReclaimPastMaxAttempts: a sweep that decides from a
// stale listing (attempt 1 of MaxAttempts 2, while the record is at
// attempt 2, whose runner died too) must not run attempt 3: the bound is
// judged by the ledger in the Reclaim itself, and the exhausted occurrence
// is abandoned, not left running to be retried by every sweep (a chaos run
// on etcd reached attempt 6 of 5).
//
// It runs in a synctest bubble: the waits for the 200 ms leases to expire
// and the sweeps after them are virtual time.
func TestStaleSweepDoesNotReclaimPastMaxAttempts(t *testing.T) {
	synctest.Test(t, staleSweepDoesNotReclaimPastMaxAttempts)
}

// staleSweepDoesNotReclaimPastMaxAttempts is TestStaleSweepDoesNotReclaimPastMaxAttempts
// inside its bubble.
func staleSweepDoesNotReclaimPastMaxAttempts(t *testing.T) {
	const ttl = 200 * time.Millisecond
	mem := memory.New()
	defer mem.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	at := backend.Instant(time.Now().Add(-time.Second))
	expired := func() bool { r, err := mem.GetRun(ctx, "crashy", at); return err == nil && r.Expired }
	if _, err := mem.Claim(ctx, backend.ClaimRequest{Job: "crashy", ScheduledAt: at, Owner: backend.Owner{Instance: "dead1", Nonce: backend.NewNonce()}, TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "attempt 1's lease expires", expired)
	if _, _, err := mem.Reclaim(ctx, backend.ClaimRequest{Job: "crashy", ScheduledAt: at, Owner: backend.Owner{Instance: "dead2", Nonce: backend.NewNonce()}, TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "attempt 2's lease expires", expired)

	ran := make(chan Run, 4)
	startJob(t, staleListing(mem), "a", Job{Name: "crashy", Schedule: "0 0 1 1 *", LeaseTTL: ttl, Crash: CrashRetry, MaxAttempts: 2,
		Func: func(ctx context.Context, r Run) error { ran <- r; return nil }})
	var r backend.Run
	eventually.True(t, 30*time.Second, "the sweep settles the exhausted occurrence", func() bool {
		var err error
		r, err = mem.GetRun(ctx, "crashy", at)
		return err == nil && (r.State != backend.Running || r.Attempt > 2)
	})
	select {
	case got := <-ran:
		t.Errorf("the sweep ran attempt %d of an occurrence with MaxAttempts 2", got.Attempt)
	default:
	}
	if r.State != backend.Abandoned || r.Attempt != 2 {
		t.Errorf("record after the sweep: state %s, attempt %d; want abandoned at attempt 2", r.State, r.Attempt)
	}
}

// lostAttempt answers every Heartbeat of the given attempt's runner
// ErrLeaseLost (its lease is not kept alive: it expires at its TTL, as
// when its heartbeats cannot reach the backend). token (buffer 1) holds
// the token of the run whose heartbeats are refused, once the test sends it.
func lostAttempt(b backend.Backend, token chan uint64) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnHeartbeat: func(ctx context.Context, next faultbackend.HeartbeatFunc, req backend.HeartbeatRequest) error {
			select {
			case t := <-token:
				token <- t
				if t == req.Token {
					return fmt.Errorf("%w: refused by the test", backend.ErrLeaseLost)
				}
			default:
			}
			return next(ctx, req)
		},
	}
}

// TestRecoveredRunSlowToStopDoesNotBlockRecovery: the "one recovery of an
// occurrence at a time" guard is held by recoverRun, which also executes
// the reclaimed run — so it stays held for the whole run. When that run's
// lease is lost (its context is cancelled) and its function is slow to
// stop, the occurrence's lease expires and, under crash policy retry, it
// must be recovered again (as this scheduler does for a first attempt in
// the same state): here the guard keeps this scheduler from ever
// recovering it while the stale function runs.
//
// It runs in a synctest bubble: attempt 2's lease expiring and the 100
// lease TTLs given to recover it are virtual time.
func TestRecoveredRunSlowToStopDoesNotBlockRecovery(t *testing.T) {
	synctest.Test(t, recoveredRunSlowToStopDoesNotBlockRecovery)
}

// recoveredRunSlowToStopDoesNotBlockRecovery is TestRecoveredRunSlowToStopDoesNotBlockRecovery
// inside its bubble.
func recoveredRunSlowToStopDoesNotBlockRecovery(t *testing.T) {
	const ttl = 300 * time.Millisecond
	mem := memory.New()
	defer mem.Close()
	lostToken := make(chan uint64, 1)
	b := lostAttempt(mem, lostToken)
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
				lostToken <- uint64(r.Token) // its lease is lost from now on
				<-ctx.Done()                 // told...
				<-stop                       // ...but slow to stop
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

// slowReclaim holds every Reclaim until release is called, counting how
// many of them are in flight at once, and counts the sweeps' listings.
func slowReclaim(b backend.Backend) (fb *faultbackend.Backend, release func(), counts func() (inflight, most, lists int)) {
	var (
		gate                  = make(chan struct{})
		mu                    sync.Mutex
		inflight, most, lists int
	)
	fb = &faultbackend.Backend{Next: b,
		OnReclaim: func(ctx context.Context, next faultbackend.ReclaimFunc, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
			mu.Lock()
			inflight++
			most = max(most, inflight)
			mu.Unlock()
			defer func() { mu.Lock(); inflight--; mu.Unlock() }()
			select {
			case <-gate:
			case <-ctx.Done():
				return backend.Grant{}, backend.Run{}, ctx.Err()
			}
			return next(ctx, req)
		},
		OnListRuns: func(ctx context.Context, next faultbackend.ListRunsFunc, f backend.RunFilter) ([]backend.Run, error) {
			mu.Lock()
			lists++
			mu.Unlock()
			return next(ctx, f)
		}}
	counts = func() (int, int, int) {
		mu.Lock()
		defer mu.Unlock()
		return inflight, most, lists
	}
	return fb, func() { close(gate) }, counts
}

// TestSlowReclaimIsNotStartedAgainBySweeps: each sweep found the dead
// runner's occurrence expired and started another recovery of it while
// the first was still waiting on a slow backend — ten a second at the
// default sweep, each with its retries. On a loaded backend this retry
// storm kept every operation slow, so every claim arrived past its misfire
// grace and nothing ran for the rest of the chaos run (issue 23). One
// recovery of an occurrence at a time per scheduler.
//
// It runs in a synctest bubble: the ten sweeps (every 10 ms) while a
// reclaim is held are virtual time.
func TestSlowReclaimIsNotStartedAgainBySweeps(t *testing.T) {
	synctest.Test(t, slowReclaimIsNotStartedAgainBySweeps)
}

// slowReclaimIsNotStartedAgainBySweeps is TestSlowReclaimIsNotStartedAgainBySweeps
// inside its bubble.
func slowReclaimIsNotStartedAgainBySweeps(t *testing.T) {
	const ttl = 200 * time.Millisecond
	mem := memory.New()
	defer mem.Close()
	sb, release, counts := slowReclaim(mem)
	s, err := New(sb, WithInstance("a"), WithSweepEvery(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan Run, 4)
	err = s.Register(Job{Name: "crashy", Schedule: "0 0 1 1 *", LeaseTTL: ttl, Crash: CrashRetry, MaxAttempts: 3,
		Func: func(ctx context.Context, r Run) error { ran <- r; return nil }})
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
	defer s.Shutdown(ctx)
	// The first recovery waits in Reclaim; let ten more sweeps see the
	// occurrence expired meanwhile.
	var lists int
	eventually.True(t, 30*time.Second, "a reclaim in flight", func() bool { n, _, l := counts(); lists = l; return n > 0 })
	eventually.True(t, 30*time.Second, "ten more sweeps", func() bool { _, _, l := counts(); return l >= lists+10 })
	if _, most, _ := counts(); most != 1 {
		t.Errorf("%d recoveries of one occurrence were in flight at once on one scheduler, want 1", most)
	}
	release()
	select {
	case r := <-ran:
		if r.Attempt != 2 {
			t.Errorf("the recovery ran attempt %d, want 2", r.Attempt)
		}
	case <-ctx.Done():
		t.Fatal("the occurrence's recovery never ran")
	}
}

// The sweeper lists every job's running records at once, a page at a
// time: expired runs of many jobs at one instant (every daily job at
// 03:00) fill pages that end inside that instant, and a page holding a
// single instant must be widened, or the runs past it would never be
// recovered (runs held for a retry, or live on another instance, stay
// running). A running record of a job not registered here is left alone.
//
// It runs in a synctest bubble: the 150 ms leases expiring beside
// one-minute live ones, and the sweeps, are virtual time.
func TestSweepRecoversExpiredRunsPastPagesOfOneInstant(t *testing.T) {
	synctest.Test(t, sweepRecoversExpiredRunsPastPagesOfOneInstant)
}

// sweepRecoversExpiredRunsPastPagesOfOneInstant is TestSweepRecoversExpiredRunsPastPagesOfOneInstant
// inside its bubble.
func sweepRecoversExpiredRunsPastPagesOfOneInstant(t *testing.T) {
	b := memory.New()
	ctx := context.Background()
	shared := backend.Instant(time.Now().Add(-time.Minute))
	earlier := shared.Add(-time.Hour)
	type occ struct {
		job string
		at  time.Time
	}
	var dead []occ
	claimFor := func(job string, at time.Time, ttl time.Duration) {
		if _, err := b.Claim(ctx, backend.ClaimRequest{Job: job, ScheduledAt: at, SpecVersion: "dead",
			Owner: backend.Owner{Instance: "dead", Nonce: backend.NewNonce()}, TTL: ttl}); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(job string, at time.Time) { claimFor(job, at, 150*time.Millisecond) }
	// Live runs at the same instant, listed before the dead ones (ties go
	// by job name): they stay running, so whole pages of them come first
	// at every sweep.
	for i := range 6 {
		claimFor(fmt.Sprintf("a-live-%d", i), shared, time.Minute)
	}
	for i := range 7 {
		dead = append(dead, occ{fmt.Sprintf("job-%d", i), shared})
		if i < 3 {
			dead = append(dead, occ{fmt.Sprintf("job-%d", i), earlier})
		}
	}
	for _, o := range dead {
		claim(o.job, o.at)
	}
	claim("not-registered", shared)
	eventually.True(t, 10*time.Second, "every lease above has expired (150 ms)", func() bool {
		for _, o := range append(dead, occ{"not-registered", shared}) {
			if r, err := b.GetRun(ctx, o.job, o.at); err != nil || !r.Expired {
				return false
			}
		}
		return true
	})

	s, err := New(b, WithInstance("sweeper"), WithSweepEvery(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	s.sweepPage = 2 // 13 runs at one instant: pages of one instant, widened
	for i := range 7 {
		if err := s.Register(Job{Name: fmt.Sprintf("job-%d", i), Schedule: "@yearly", Crash: CrashSkip,
			Func: func(context.Context, Run) error { return nil }}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(sctx)
	})
	eventually.True(t, 10*time.Second, "every expired run of a registered job is abandoned", func() bool {
		for _, o := range dead {
			if r, err := b.GetRun(ctx, o.job, o.at); err != nil || r.State != backend.Abandoned {
				return false
			}
		}
		return true
	})
	if r, err := b.GetRun(ctx, "not-registered", shared); err != nil || r.State != backend.Running {
		t.Fatalf("a job not registered here: %+v, %v; want it left running", r, err)
	}
}

// listCounting counts ListRuns calls in lists.
func listCounting(b backend.Backend, lists *atomic.Int64) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnListRuns: func(ctx context.Context, next faultbackend.ListRunsFunc, f backend.RunFilter) ([]backend.Run, error) {
			lists.Add(1)
			return next(ctx, f)
		},
	}
}

// BenchmarkIdleSweep is one crash sweep of an idle scheduler (nothing
// running) with 100, 1,000 and 10,000 registered jobs on SQLite: its cost
// and its ListRuns calls must not grow with the jobs.
//
//	go test -run '^$' -bench IdleSweep ./schedule/
func BenchmarkIdleSweep(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			ctx := context.Background()
			db, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "idle.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			var lists atomic.Int64
			lb := listCounting(db, &lists)
			s, err := New(lb, WithInstance("idle"))
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if err := s.Register(Job{Name: fmt.Sprintf("job-%d", i), Schedule: "0 3 * * *",
					Func: func(context.Context, Run) error { return nil }}); err != nil {
					b.Fatal(err)
				}
			}
			lists.Store(0)
			b.ResetTimer()
			for range b.N {
				s.sweep(ctx)
			}
			b.StopTimer()
			b.ReportMetric(float64(lists.Load())/float64(b.N), "lists/sweep")
		})
	}
}
