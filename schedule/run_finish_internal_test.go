package schedule

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/mysql"
	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// failingFinish refuses the first n Finish calls of job "once" without
// applying them, as a backend does during a short outage.
// calls counts the Finish calls of "once" made.
func failingFinish(b backend.Backend, n int) (fb *faultbackend.Backend, calls func() int) {
	var (
		mu sync.Mutex
		c  int
	)
	calls = func() int { mu.Lock(); defer mu.Unlock(); return c }
	return &faultbackend.Backend{Next: b,
		OnFinish: func(ctx context.Context, next faultbackend.FinishFunc, req backend.FinishRequest) error {
			if req.Job != "once" { // schedule versions are recorded through Finish too
				return next(ctx, req)
			}
			mu.Lock()
			c++
			fail := c <= n
			mu.Unlock()
			if fail {
				return errors.New("injected: connection refused")
			}
			return next(ctx, req)
		}}, calls
}

// TestFinishRetriedUntilLeaseEnds (issue 14 item 7): a Finish that fails
// must be retried while the run's lease lasts, not given up after a few
// tries: a run left "running" is taken for a crash, and under crash policy
// retry a job that succeeded runs again. Here Finish fails 10 times in a
// row (about 1.3 s of retries, where the old code gave up after 6 tries in
// 0.3 s) within a 3 s lease; the outcome must still be recorded, and the
// occurrence run once.
//
// It runs in a synctest bubble: the ~1.3 s of Finish retries within the
// 3 s lease are virtual time, so load cannot push them past the lease.
func TestFinishRetriedUntilLeaseEnds(t *testing.T) {
	synctest.Test(t, finishRetriedUntilLeaseEnds)
}

// finishRetriedUntilLeaseEnds is TestFinishRetriedUntilLeaseEnds
// inside its bubble.
func finishRetriedUntilLeaseEnds(t *testing.T) {
	const ttl = 3 * time.Second
	mem := memory.New()
	t.Cleanup(func() { mem.Close() }) // after the schedulers stop
	fb, finishCalls := failingFinish(mem, 10)
	ran := make(chan Run, 100)
	startJob(t, fb, "a", Job{Name: "once", Schedule: "@every 2s", LeaseTTL: ttl, Crash: CrashRetry, MaxAttempts: 3,
		Func: func(ctx context.Context, r Run) error { ran <- r; return nil }})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var first Run
	select {
	case first = <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the job never ran")
	}
	var r backend.Run
	if !eventually.Within(4*ttl, func() bool {
		var err error
		if r, err = mem.GetRun(ctx, "once", first.ScheduledAt); err != nil {
			t.Fatal(err)
		}
		return r.State == backend.Succeeded
	}) {
		t.Fatalf("%v after the run, with %d Finish calls, the ledger says %s (attempt %d), want succeeded", 4*ttl, finishCalls(), r.State, r.Attempt)
	}
	if r.Attempt != 1 {
		t.Fatalf("the occurrence succeeded as attempt %d: the first run's outcome was lost and the job ran again", r.Attempt)
	}
	for {
		select {
		case r := <-ran:
			if r.ScheduledAt.Equal(first.ScheduledAt) {
				t.Fatalf("occurrence %v ran again (attempt %d)", r.ScheduledAt, r.Attempt)
			}
			continue
		default:
		}
		break
	}
}

// TestClaimFinishRetried: the same for Claim.Finish (ClaimOccurrence, used
// by the adapters and triggers).
//
// It runs in a synctest bubble, as TestFinishRetriedUntilLeaseEnds.
func TestClaimFinishRetried(t *testing.T) {
	synctest.Test(t, claimFinishRetried)
}

// claimFinishRetried is TestClaimFinishRetried
// inside its bubble.
func claimFinishRetried(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	fb, _ := failingFinish(mem, 10)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	at := backend.Instant(time.Now().Add(-time.Second))
	c, err := ClaimOccurrence(ctx, fb, "once", at, ClaimOptions{Instance: "a", TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Finish(ctx, nil); err != nil {
		t.Fatalf("Finish after 10 refused attempts within the lease: %v", err)
	}
	if r, err := mem.GetRun(ctx, "once", at); err != nil || r.State != backend.Succeeded {
		t.Fatalf("ledger: %s, %v; want succeeded", r.State, err)
	}
}

// lostFinishReply applies the first Finish and then reports a broken
// connection (its reply is lost); GetRun fails (getRunFail > 0: that many
// times with a transient error) or blocks until its ctx ends (hangGetRun).
type lostFinishReply struct {
	getRunFail  int
	hangGetRun  bool
	hbApplyFail bool // Heartbeat is applied, but its reply is lost
	keepFinish  bool // Finish replies are not lost
}

// over returns b with these faults, and the count of Finish calls made.
func (c lostFinishReply) over(b backend.Backend) (fb *faultbackend.Backend, finishes func() int) {
	var (
		mu         sync.Mutex
		n          int
		getRunFail = c.getRunFail
	)
	fb = &faultbackend.Backend{Next: b,
		OnFinish: func(ctx context.Context, next faultbackend.FinishFunc, req backend.FinishRequest) error {
			mu.Lock()
			n++
			n := n
			mu.Unlock()
			if err := ctx.Err(); err != nil { // a network backend sends nothing on a dead ctx
				return err
			}
			err := next(ctx, req)
			if n == 1 && err == nil && !c.keepFinish {
				return errors.New("injected: connection reset (the Finish was applied)")
			}
			return err
		},
		OnGetRun: func(ctx context.Context, next faultbackend.GetRunFunc, job string, at time.Time) (backend.Run, error) {
			mu.Lock()
			fail := getRunFail > 0
			if fail {
				getRunFail--
			}
			mu.Unlock()
			if c.hangGetRun {
				<-ctx.Done() // a backend that does not answer (a partition), bounded only by ctx
				return backend.Run{}, ctx.Err()
			}
			if fail {
				return backend.Run{}, errors.New("injected: connection refused")
			}
			return next(ctx, job, at)
		},
		OnHeartbeat: func(ctx context.Context, next faultbackend.HeartbeatFunc, req backend.HeartbeatRequest) error {
			err := next(ctx, req)
			if c.hbApplyFail && err == nil {
				return errors.New("injected: reply lost (the heartbeat was applied)")
			}
			return err
		}}
	finishes = func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
	return fb, finishes
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
	fb, _ := lostFinishReply{getRunFail: 1}.over(mem)
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
//
// It runs in a synctest bubble: the lease deadline and the 3 s past it
// finishRun is given are virtual time.
func TestFinishRunBoundedByLease(t *testing.T) {
	synctest.Test(t, finishRunBoundedByLease)
}

// finishRunBoundedByLease is TestFinishRunBoundedByLease
// inside its bubble.
func finishRunBoundedByLease(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	fb, _ := lostFinishReply{hangGetRun: true}.over(mem)
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
//
// It runs in a synctest bubble: the 1.5 s lease whose local deadline
// passes while the ledger still holds it is virtual time.
func TestClaimFinishAfterUnconfirmedHeartbeats(t *testing.T) {
	synctest.Test(t, claimFinishAfterUnconfirmedHeartbeats)
}

// claimFinishAfterUnconfirmedHeartbeats is TestClaimFinishAfterUnconfirmedHeartbeats
// inside its bubble.
func claimFinishAfterUnconfirmedHeartbeats(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	fb, finishes := lostFinishReply{hbApplyFail: true, keepFinish: true}.over(mem)
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
	t.Logf("Finish: %v; Finish attempts (dead ctx): %d; ledger after: state %s expired=%v", ferr, finishes(), r.State, r.Expired)
	if r.State == backend.Running && !r.Expired && ferr != nil && !errors.Is(ferr, backend.ErrLeaseLost) {
		t.Fatalf("the ledger still held the run's lease for this owner, yet Finish was tried %d time(s), each with a deadline already past (nothing sent), and returned %v (neither recorded nor ErrLeaseLost)", finishes(), ferr)
	}
}

// TestFinishAppliedRealBackends: Finish applied, reply lost, retry
// refused as lost; finishRun's GetRun comparison (owner, token, state)
// must recognise the run as finished by us after a real round trip, for a
// Failed outcome with bytes the column cannot hold as they are.
func TestFinishAppliedRealBackends(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := "rv" + backend.NewNonce().String()[:8] + "_"
	open := map[string]func() (backend.Backend, error){
		"postgres": func() (backend.Backend, error) {
			return postgres.Open(ctx, testserver.PostgresURL(t), postgres.WithTablePrefix(prefix))
		},
		"mysql": func() (backend.Backend, error) {
			return mysql.Open(ctx, testserver.MySQLURL(t), mysql.WithTablePrefix(prefix))
		},
	}
	for name, o := range open {
		t.Run(name, func(t *testing.T) {
			b, err := o()
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			defer func() {
				if name == "postgres" {
					tables := "leasehold." + prefix + "jobs, leasehold." + prefix + "leases, leasehold." + prefix + "meta, leasehold." + prefix + "runs"
					if c, err := pgx.Connect(context.Background(), testserver.PostgresURL(t)); err == nil {
						_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS "+tables+" CASCADE")
						c.Close(context.Background())
					}
					return
				}
				testserver.MySQLExec(t, testserver.MySQLURL(t), "DROP TABLE IF EXISTS "+prefix+"jobs, "+prefix+"leases, "+prefix+"meta, "+prefix+"runs")
			}()
			fb, _ := lostFinishReply{}.over(b)
			at := backend.Instant(time.Now().Add(-time.Second))
			c, err := ClaimOccurrence(ctx, fb, "once", at, ClaimOptions{Instance: "inst ", TTL: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ferr := c.Finish(ctx, errors.New("bad \x00 \xc3"))
			r, _ := b.GetRun(ctx, "once", at)
			if ferr != nil {
				t.Fatalf("Finish: %v (ledger: %s owner %v token %d)", ferr, r.State, r.Owner, r.Token)
			}
		})
	}
}

// dropAfterFinish is a PostgreSQL backend reached through a chaos proxy:
// the first Finish is applied and its reply "lost" (reported as a broken
// connection); the retry is refused as lost; then the network goes dark
// (the proxy black-holes every byte) just as finishRun reads the ledger.
func dropAfterFinish(b backend.Backend, p *chaos.Proxy) *faultbackend.Backend {
	n := 0
	return &faultbackend.Backend{
		Next: b,
		OnFinish: func(ctx context.Context, next faultbackend.FinishFunc, req backend.FinishRequest) error {
			n++
			err := next(ctx, req)
			if n == 1 && err == nil {
				return errors.New("injected: connection reset (the Finish was applied)")
			}
			if n == 2 {
				p.SetDrop(true)
			}
			return err
		},
	}
}

// TestFinishRunBoundedOnPostgresPartition: the Scheduler calls finishRun with
// context.Background(); its GetRun after an unknown Finish has no deadline,
// and pgx has none of its own, so a partition at that moment blocks the
// run's goroutine (and its inflight slot) far past the run's lease deadline.
func TestFinishRunBoundedOnPostgresPartition(t *testing.T) {
	p, err := chaos.New("127.0.0.1:5432")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := "rv" + backend.NewNonce().String()[:8] + "_"
	u := strings.Replace(testserver.PostgresURL(t), "127.0.0.1:5432", p.Addr(), 1)
	pb, err := postgres.Open(ctx, u, postgres.WithTablePrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if c, err := pgx.Connect(context.Background(), testserver.PostgresURL(t)); err == nil {
			_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS leasehold."+prefix+"jobs, leasehold."+prefix+"leases, leasehold."+prefix+"meta, leasehold."+prefix+"runs CASCADE")
			c.Close(context.Background())
		}
	}()
	defer pb.Close()
	fb := dropAfterFinish(pb, p)
	at := backend.Instant(time.Now().Add(-time.Second))
	owner := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	const ttl = 2 * time.Second
	sent := time.Now()
	g, err := pb.Claim(ctx, backend.ClaimRequest{Job: "once", ScheduledAt: at, Owner: owner, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	until := sent.Add(defaultLease.span(g.TTL))
	done := make(chan error, 1)
	go func() {
		done <- finishRun(context.Background(), fb, "once", at, owner, g.Token, backend.Outcome{State: backend.Succeeded}, until, g.TTL)
	}()
	limit := time.Until(until) + 5*time.Second
	select {
	case err := <-done:
		t.Logf("finishRun returned %v", err)
	case <-time.After(limit):
		p.SetDrop(false)
		p.CloseConns() // let the goroutine end
		t.Fatalf("finishRun still blocked in GetRun %v past the run's lease deadline", 5*time.Second)
	}
}
