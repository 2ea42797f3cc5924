package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

// scheduleLog records observed events; safe for concurrent use.
type scheduleLog struct {
	mu  sync.Mutex
	evs []schedule.Event
}

func (l *scheduleLog) ObserveSchedule(ev schedule.Event) {
	l.mu.Lock()
	l.evs = append(l.evs, ev)
	l.mu.Unlock()
}

func (l *scheduleLog) count(match func(schedule.Event) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ev := range l.evs {
		if match(ev) {
			n++
		}
	}
	return n
}

func kindResult(k schedule.EventKind, job, result string) func(schedule.Event) bool {
	return func(ev schedule.Event) bool { return ev.Kind == k && ev.Job == job && ev.Result == result }
}

// TestObserverClaimsAndRuns runs in a synctest bubble: the 20 ms and 50 ms
// instants both instances claim are virtual time.
func TestObserverClaimsAndRuns(t *testing.T) {
	synctest.Test(t, observerClaimsAndRuns)
}

// observerClaimsAndRuns is TestObserverClaimsAndRuns
// inside its bubble.
func observerClaimsAndRuns(t *testing.T) {
	b := memory.New()
	fx := newEffects()
	var failed sync.Map
	logs := []*scheduleLog{{}, {}}
	var scheds []*schedule.Scheduler
	for i, lg := range logs {
		s := newScheduler(t, b, fmt.Sprintf("inst-%d", i), schedule.WithObserver(lg), schedule.WithNamespace("obs"))
		if err := s.Register(schedule.Job{Name: "tick", Schedule: "@every 20ms",
			Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }}); err != nil {
			t.Fatal(err)
		}
		if err := s.Register(schedule.Job{Name: "broken", Schedule: "@every 50ms",
			Func: func(_ context.Context, r schedule.Run) error {
				failed.Store(r.ScheduledAt.UnixMilli(), true)
				return errors.New("boom")
			}}); err != nil {
			t.Fatal(err)
		}
		scheds = append(scheds, s)
	}
	for _, s := range scheds {
		start(t, s)
	}
	eventually.True(t, time.Minute, "50 runs of tick", func() bool { return fx.count() >= 50 })
	for _, s := range scheds {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	sum := func(match func(schedule.Event) bool) int { return logs[0].count(match) + logs[1].count(match) }
	won := sum(kindResult(schedule.EventClaim, "tick", schedule.ClaimWon))
	conflict := sum(kindResult(schedule.EventClaim, "tick", schedule.ClaimConflict))
	succeeded := sum(kindResult(schedule.EventRun, "tick", "succeeded"))
	// What the jobs wrote, not what the scheduler says, is the reference.
	if ran := len(fx.instants()); won != ran || succeeded != ran {
		t.Fatalf("tick ran %d occurrences; observed %d claims won and %d succeeded runs", ran, won, succeeded)
	}
	if conflict == 0 || conflict > won {
		t.Fatalf("%d conflicted claims for %d won with two instances claiming every occurrence", conflict, won)
	}
	nFailed := 0
	failed.Range(func(any, any) bool { nFailed++; return true })
	if got := sum(kindResult(schedule.EventRun, "broken", "failed")); got != nFailed || nFailed == 0 {
		t.Fatalf("broken failed %d times; observed %d failed runs", nFailed, got)
	}
	if got := sum(kindResult(schedule.EventRun, "broken", "succeeded")); got != 0 {
		t.Fatalf("%d succeeded runs observed for a job that always fails", got)
	}
	if n := sum(func(ev schedule.Event) bool { return ev.Namespace != "obs" }); n != 0 {
		t.Fatalf("%d events without the scheduler's namespace", n)
	}
}

func TestObserverCatchUp(t *testing.T) {
	b := memory.New()
	ctx := context.Background()
	spec, _ := schedule.Parse("@every 1h", "")
	last := spec.Next(time.Now().Add(-7 * time.Hour))
	if _, err := b.Claim(ctx, backend.ClaimRequest{Job: "hourly", ScheduledAt: last, SpecVersion: spec.Version(),
		Owner: backend.Owner{Instance: "old", Nonce: backend.NewNonce()}, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	var lg scheduleLog
	fx := newEffects()
	s := newScheduler(t, b, "back", schedule.WithObserver(&lg))
	if err := s.Register(schedule.Job{Name: "hourly", Schedule: "@every 1h", Misfire: schedule.MisfireRunAll, MaxCatchUp: 3,
		MisfireWindow: 24 * time.Hour, Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }}); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	eventually.True(t, 10*time.Second, "3 catch-up runs", func() bool { return fx.count() >= 3 })
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	caught := lg.count(func(ev schedule.Event) bool {
		return ev.Kind == schedule.EventClaim && ev.Result == schedule.ClaimWon && ev.CatchUp
	})
	if caught != fx.count() {
		t.Fatalf("%d catch-up claims observed, %d missed occurrences ran", caught, fx.count())
	}
}

// TestObserverPrune runs in a synctest bubble: the wait past twice the
// 300 ms retention, and the prune pass after it, are virtual time.
func TestObserverPrune(t *testing.T) {
	synctest.Test(t, observerPrune)
}

// observerPrune is TestObserverPrune
// inside its bubble.
func observerPrune(t *testing.T) {
	b := memory.New()
	ctx := context.Background()
	// Three finished runs, older than the retention by the time the
	// scheduler starts.
	const retention = 300 * time.Millisecond
	for i := range 3 {
		at := backend.Instant(time.Now().Add(-time.Duration(i+1) * time.Second))
		owner := backend.Owner{Instance: "old", Nonce: backend.NewNonce()}
		g, err := b.Claim(ctx, backend.ClaimRequest{Job: "old", ScheduledAt: at, Owner: owner, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Finish(ctx, backend.FinishRequest{Job: "old", ScheduledAt: at, Owner: owner, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded}}); err != nil {
			t.Fatal(err)
		}
	}
	finished := time.Now()
	eventually.True(t, 5*time.Second, "the old runs are past the retention", func() bool { return time.Since(finished) > 2*retention })

	var lg scheduleLog
	s := newScheduler(t, b, "pruner", schedule.WithObserver(&lg), schedule.WithRetention(retention))
	start(t, s)
	eventually.True(t, 10*time.Second, "a prune pass", func() bool {
		return lg.count(func(ev schedule.Event) bool { return ev.Kind == schedule.EventPrune }) > 0
	})
	if n := lg.count(func(ev schedule.Event) bool { return ev.Kind == schedule.EventPrune && ev.Count == 3 && ev.Err == nil }); n != 1 {
		t.Fatalf("prune events %+v, want one deleting 3 runs", lg.evs)
	}
}
