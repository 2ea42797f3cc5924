package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
	"github.com/leasehold/leasehold/schedule"
)

// stallClock is real time that can be stalled, as a SIGSTOP stalls a
// process: while stalled no timer it handed out fires; on Resume the
// overdue ones fire at once, as after SIGCONT. Step moves Now, as a wall
// clock step does (timers keep their real durations, as Go's do).
//
// Its timers end when the test does (after the schedulers' shutdown,
// which the test registered later), so none outlives a synctest bubble.
type stallClock struct {
	mu     sync.Mutex
	gate   chan struct{} // closed while running
	offset time.Duration
	done   chan struct{} // closed when the test ends
}

func newStallClock(t *testing.T) *stallClock {
	g := make(chan struct{})
	close(g)
	c := &stallClock{gate: g, done: make(chan struct{})}
	t.Cleanup(func() { close(c.done) })
	return c
}

func (c *stallClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *stallClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-c.done:
			return
		}
		for {
			c.mu.Lock()
			g := c.gate
			c.mu.Unlock()
			select {
			case <-g:
			case <-c.done:
				return
			}
			c.mu.Lock()
			open := g == c.gate
			c.mu.Unlock()
			if open {
				ch <- c.Now()
				return
			}
		}
	}()
	return ch
}

func (c *stallClock) Stall() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gate = make(chan struct{})
}

func (c *stallClock) Resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.gate)
}

func (c *stallClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// stallAcross stalls clock from 300 ms past an instant of a period-long
// schedule for n periods, and resumes it 600 ms past an instant, so that
// every instant in between is late by more than a 200 ms grace. It
// returns when it stalled and resumed.
func stallAcross(clock *stallClock, period time.Duration, n int) (stalledAt, resumed time.Time) {
	untilPhase(period, 300*time.Millisecond)
	stalledAt = time.Now()
	clock.Stall()
	time.Sleep(time.Duration(n) * period)
	untilPhase(period, 600*time.Millisecond)
	resumed = time.Now()
	clock.Resume()
	return stalledAt, resumed
}

// started is one run's instant and how late it started, on the job's clock.
type started struct {
	at       time.Time
	late     time.Duration
	from, to time.Time // real time the function ran
}

type startLog struct {
	mu   sync.Mutex
	runs []started
}

func (l *startLog) add(s started) { l.mu.Lock(); l.runs = append(l.runs, s); l.mu.Unlock() }
func (l *startLog) all() []started {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]started(nil), l.runs...)
}

// dueAfter counts the runs of instants after t.
func (l *startLog) dueAfter(t time.Time) int {
	n := 0
	for _, r := range l.all() {
		if r.at.After(t) {
			n++
		}
	}
	return n
}

// dueBetween returns the runs of instants strictly between from and to.
func (l *startLog) dueBetween(from, to time.Time) []started {
	var in []started
	for _, r := range l.all() {
		if r.at.After(from) && r.at.Before(to) {
			in = append(in, r)
		}
	}
	return in
}

// untilPhase sleeps until real time is phase past a multiple of period.
func untilPhase(period, phase time.Duration) {
	now := time.Now()
	next := now.Truncate(period).Add(phase)
	if !next.After(now) {
		next = next.Add(period)
	}
	time.Sleep(time.Until(next))
}

// TestPauseAppliesMisfirePolicy stalls a scheduler past several instants
// of a 1 s job and resumes it 600 ms after an instant (late beyond the
// 200 ms grace): the missed instants are misfires. Before, all of them
// started at once on resume, whatever the policy.
//
// Each policy runs in a synctest bubble: the stall, the job's 50 ms and
// the lateness measured are virtual time, so what is asserted (which
// instants ran, in what order, how late by the job's clock) does not
// depend on how loaded the machine is.
func TestPauseAppliesMisfirePolicy(t *testing.T) {
	for _, tc := range []struct {
		policy schedule.Misfire
		late   int // runs expected among the missed instants
	}{
		{schedule.MisfireSkip, 0},
		{schedule.MisfireRunOnce, 1},
		{schedule.MisfireRunAll, 2}, // MaxCatchUp
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) { pauseAppliesMisfirePolicy(t, tc.policy, tc.late) })
		})
	}
}

// pauseAppliesMisfirePolicy is one case of TestPauseAppliesMisfirePolicy,
// run inside a bubble.
func pauseAppliesMisfirePolicy(t *testing.T, policy schedule.Misfire, wantLate int) {
	const period, grace = time.Second, 200 * time.Millisecond
	clock := newStallClock(t)
	s := newScheduler(t, memory.New(), "a", schedule.WithClock(clock))
	var log startLog
	err := s.Register(schedule.Job{Name: "tick", Schedule: "@every 1s", Misfire: policy, MisfireGrace: grace, MaxCatchUp: 2,
		Func: func(ctx context.Context, r schedule.Run) error {
			from := time.Now()
			late := clock.Now().Sub(r.ScheduledAt)
			time.Sleep(50 * time.Millisecond)
			log.add(started{at: r.ScheduledAt, late: late, from: from, to: time.Now()})
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	start(t, s)
	stalledAt, resumed := stallAcross(clock, period, 3)
	// Two more instants on time after the resume.
	eventually.True(t, 5*time.Second, "two on-time runs after the resume", func() bool { return log.dueAfter(resumed) >= 2 })
	var late []started
	for _, r := range log.all() {
		if r.at.After(stalledAt) && r.at.Before(resumed) {
			late = append(late, r)
		} else if r.late > grace {
			t.Errorf("on-time instant %v started %v late (grace %v)", r.at, r.late, grace)
		}
	}
	if len(late) != wantLate {
		t.Fatalf("policy %s: %d of the missed instants ran, want %d: %+v", policy, len(late), wantLate, late)
	}
	for i := 1; i < len(late); i++ { // run-all: in order, one after another
		if !late[i].at.After(late[i-1].at) || late[i].from.Before(late[i-1].to) {
			t.Errorf("catch-up runs out of order or overlapping: %+v", late)
		}
	}
	if wantLate > 0 && !late[len(late)-1].at.After(resumed.Add(-period)) {
		t.Errorf("the latest missed instant was not among those run: %+v (resumed %v)", late, resumed)
	}
}

// TestClockStepForwardSkipsMisfires steps the scheduler's wall clock 3 s
// forward: the instants it jumped over are misfires, not run under policy
// skip, and the instants after them run when the backend's clock says they
// are due, one at a time (claims ahead of it are refused as too early).
// Before, each jumped-over instant was claimed at once and then run.
//
// It runs in a synctest bubble, so how late a run started (asserted
// below) is virtual time, not how loaded the machine was.
func TestClockStepForwardSkipsMisfires(t *testing.T) {
	synctest.Test(t, clockStepForwardSkipsMisfires)
}

// clockStepForwardSkipsMisfires is TestClockStepForwardSkipsMisfires inside
// its bubble.
func clockStepForwardSkipsMisfires(t *testing.T) {
	const grace, step = 200 * time.Millisecond, 3 * time.Second
	clock := newStallClock(t)
	s := newScheduler(t, memory.New(), "a", schedule.WithClock(clock))
	var log startLog
	err := s.Register(schedule.Job{Name: "tick", Schedule: "@every 100ms", MisfireGrace: grace,
		Func: func(ctx context.Context, r schedule.Run) error {
			log.add(started{at: r.ScheduledAt, late: time.Since(r.ScheduledAt), from: time.Now()})
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	start(t, s)
	eventually.True(t, 5*time.Second, "runs before the step", func() bool { return len(log.all()) >= 3 })
	before := time.Now()
	clock.Step(step)
	eventually.True(t, 10*time.Second, "runs after the step", func() bool {
		n := 0
		for _, r := range log.all() {
			if r.at.After(before.Add(step)) {
				n++
			}
		}
		return n >= 3
	})
	for _, r := range log.all() {
		if r.at.After(before.Add(grace)) && r.at.Before(before.Add(step-grace)) {
			t.Errorf("jumped-over instant %v ran (step at %v)", r.at, before)
		}
		if r.late > grace {
			t.Errorf("instant %v started %v late in real time (grace %v)", r.at, r.late, grace)
		}
	}
}

func TestMisfireGraceValidated(t *testing.T) {
	for _, j := range []schedule.Job{
		{Name: "j", Schedule: "@every 1s", MisfireGrace: -time.Second},
		{Name: "j", Schedule: "@every 1s", MisfireGrace: 2 * time.Minute, MisfireWindow: time.Minute},
	} {
		j.Func = func(context.Context, schedule.Run) error { return nil }
		err := schedule.Validate(j, 0)
		if err == nil || !strings.Contains(err.Error(), "misfire grace") {
			t.Errorf("Validate(%+v) = %v, want an error naming misfire grace", j, err)
		}
	}
}

// stalledSend holds the first Claim back before sending it, as a process
// paused between deciding to claim and its request leaving does; claims
// made meanwhile wait for it. (A channel, not a sync.Once: a goroutine
// blocked in Once.Do is not durably blocked, and would stall a synctest
// bubble's clock.)
func stalledSend(b backend.Backend, hold time.Duration) *faultbackend.Backend {
	var first atomic.Bool
	released := make(chan struct{}) // closed when the first claim was let go
	return &faultbackend.Backend{
		Next: b,
		OnClaim: func(ctx context.Context, next faultbackend.ClaimFunc, req backend.ClaimRequest) (backend.Grant, error) {
			if req.Job == "tick" {
				if first.CompareAndSwap(false, true) {
					time.Sleep(hold)
					close(released)
				} else {
					<-released
				}
			}
			return next(ctx, req)
		},
	}
}

// TestLedgerRefusesClaimOlderThanMisfireWindow holds a claim back past the
// job's misfire window before it is sent: the ledger refuses it (the
// backend's clock says it is a misfire), so the occurrence is neither
// recorded nor run, and the scheduler reports a misfire.
//
// It runs in a synctest bubble: the hold and the lateness asserted are
// virtual time.
func TestLedgerRefusesClaimOlderThanMisfireWindow(t *testing.T) {
	synctest.Test(t, ledgerRefusesClaimOlderThanMisfireWindow)
}

// ledgerRefusesClaimOlderThanMisfireWindow is
// TestLedgerRefusesClaimOlderThanMisfireWindow inside its bubble.
func ledgerRefusesClaimOlderThanMisfireWindow(t *testing.T) {
	mem := memory.New()
	var misfires atomic.Int64
	s := newScheduler(t, stalledSend(mem, 1500*time.Millisecond), "a",
		schedule.WithObserver(schedule.ObserverFunc(func(ev schedule.Event) {
			if ev.Kind == schedule.EventMisfire && errors.Is(ev.Err, backend.ErrOccurrenceTooLate) {
				misfires.Add(1)
			}
		})))
	var log startLog
	err := s.Register(schedule.Job{Name: "tick", Schedule: "@every 1s", Misfire: schedule.MisfireRunOnce,
		MisfireWindow: time.Second, MisfireGrace: 200 * time.Millisecond,
		Func: func(ctx context.Context, r schedule.Run) error {
			log.add(started{at: r.ScheduledAt, late: time.Since(r.ScheduledAt), from: time.Now()})
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	start(t, s)
	eventually.True(t, 10*time.Second, "the held-back claim refused as a misfire", func() bool { return misfires.Load() == 1 })
	eventually.True(t, 5*time.Second, "later occurrences run", func() bool { return len(log.all()) >= 2 })
	for _, r := range log.all() {
		if r.late > time.Second {
			t.Errorf("occurrence %v ran %v late, past its misfire window", r.at, r.late)
		}
	}
	runs, err := mem.ListRuns(context.Background(), backend.RunFilter{Job: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if time.Since(r.ScheduledAt) > 0 && r.ClaimedAt.Sub(r.ScheduledAt) > time.Second {
			t.Errorf("run %v claimed %v after its instant", r.ScheduledAt, r.ClaimedAt.Sub(r.ScheduledAt))
		}
	}
}

// TestClockBehindSkipsByTheLedgersClock steps the scheduler's clock 2 s
// back: by its own clock each instant comes due on time, but by the
// ledger's it is 2 s late. Under policy skip the ledger refuses such
// claims (MaxLate is the grace), so nothing starts later than its grace in
// real time. Before, each ran 2 s late.
//
// It runs in a synctest bubble (the ledger's clock and the scheduler's
// are virtual time) and keeps the clock behind until five instants that
// came due by it were judged - refused by the ledger, or run - rather
// than for a fixed while: the assertion below then has those five to
// judge, whichever way the code goes.
func TestClockBehindSkipsByTheLedgersClock(t *testing.T) {
	synctest.Test(t, clockBehindSkipsByTheLedgersClock)
}

// clockBehindSkipsByTheLedgersClock is TestClockBehindSkipsByTheLedgersClock
// inside its bubble.
func clockBehindSkipsByTheLedgersClock(t *testing.T) {
	const grace, behind = 200 * time.Millisecond, 2 * time.Second
	clock := newStallClock(t)
	var mu sync.Mutex
	var refused []time.Time // instants the ledger refused as too late
	s := newScheduler(t, memory.New(), "a", schedule.WithClock(clock),
		schedule.WithObserver(schedule.ObserverFunc(func(ev schedule.Event) {
			if ev.Kind == schedule.EventMisfire && errors.Is(ev.Err, backend.ErrOccurrenceTooLate) {
				mu.Lock()
				refused = append(refused, ev.ScheduledAt)
				mu.Unlock()
			}
		})))
	var log startLog
	err := s.Register(schedule.Job{Name: "tick", Schedule: "@every 100ms", MisfireGrace: grace,
		Func: func(ctx context.Context, r schedule.Run) error {
			log.add(started{at: r.ScheduledAt, late: time.Since(r.ScheduledAt), from: time.Now()})
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	start(t, s)
	eventually.True(t, 5*time.Second, "runs before the step", func() bool { return len(log.all()) >= 3 })
	clock.Step(-behind)
	stepped := time.Now()
	judged := func() int { // instants that came due by the behind clock, refused or run
		mu.Lock()
		n := len(refused)
		mu.Unlock()
		for _, r := range log.all() {
			if r.from.After(stepped) {
				n++
			}
		}
		return n
	}
	eventually.True(t, 10*time.Second, "five instants due by the behind clock judged (refused or run)", func() bool { return judged() >= 5 })
	clock.Step(behind)
	righted := time.Now()
	eventually.True(t, 5*time.Second, "runs after the clock is right again", func() bool {
		for _, r := range log.all() {
			if r.from.After(righted) {
				return true
			}
		}
		return false
	})
	for _, r := range log.all() {
		if r.late > grace+100*time.Millisecond {
			t.Errorf("instant %v started %v late by the ledger's clock (grace %v)", r.at, r.late, grace)
		}
	}
}

func TestMisfirePolicies(t *testing.T) {
	cases := []struct {
		policy schedule.Misfire
		want   int // missed occurrences run
	}{
		{schedule.MisfireSkip, 0},
		{schedule.MisfireRunOnce, 1},
		{schedule.MisfireRunAll, 3}, // MaxCatchUp
	}
	for _, c := range cases {
		t.Run(string(c.policy), func(t *testing.T) {
			b := memory.New()
			fx := newEffects()
			spec, _ := schedule.Parse("@every 1h", "")
			now := time.Now()
			// The job last ran 6 hours ago; nobody was alive since.
			last := spec.Next(now.Add(-7 * time.Hour))
			g, err := b.Claim(context.Background(), backend.ClaimRequest{Job: "job", ScheduledAt: last, SpecVersion: spec.Version(),
				Owner: backend.Owner{Instance: "old", Nonce: backend.NewNonce()}, TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			s := newScheduler(t, b, "back")
			if err := s.Register(schedule.Job{Name: "job", Schedule: "@every 1h", Misfire: c.policy, MaxCatchUp: 3, MisfireWindow: 24 * time.Hour,
				Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }}); err != nil {
				t.Fatal(err)
			}
			_ = g
			start(t, s)
			if c.want > 0 {
				eventually.True(t, 10*time.Second, fmt.Sprintf("%d catch-up runs", c.want), func() bool { return fx.count() >= c.want })
			}
			if err := s.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := fx.instants()
			if len(got) != c.want {
				t.Fatalf("%d missed occurrences ran (%v), want %d", len(got), got, c.want)
			}
			// The ones run are the latest missed.
			latest := spec.Next(now.Add(-time.Hour))
			if !latest.After(now) && c.want > 0 && got[len(got)-1] != latest.UnixMilli() && got[len(got)-1] != latest.Add(-time.Hour).UnixMilli() {
				t.Fatalf("latest caught up %v, want the latest missed", time.UnixMilli(got[len(got)-1]).UTC())
			}
		})
	}
}
