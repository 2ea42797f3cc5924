package schedule

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// perInstant records, per occurrence, the attempts the job itself saw.
type perInstant struct {
	mu sync.Mutex
	m  map[int64][]attemptSeen
}

func (p *perInstant) add(r Run) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[int64][]attemptSeen{}
	}
	k := r.ScheduledAt.UnixMilli()
	p.m[k] = append(p.m[k], attemptSeen{attempt: r.Attempt, token: uint64(r.Token), instance: r.Instance, start: time.Now()})
}

func (p *perInstant) get(at time.Time) []attemptSeen {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]attemptSeen(nil), p.m[at.UnixMilli()]...)
}

func (p *perInstant) total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, v := range p.m {
		n += len(v)
	}
	return n
}

// TestRetryNotStarvedBehindHundredHeldRuns (found by review; the bug it shows): a failed attempt waiting
// for its retry stays "running" in the ledger for the whole backoff. The
// sweeper reads only the 100 newest running records of a job, so once 100
// newer occurrences are held for their own retries, an older occurrence
// whose backoff is over (its lease lapsed) is never seen, and its retry
// does not come — not after the backoff, not for as long as the newer
// ones keep failing.
//
// It runs in a synctest bubble: the 400 ms before the newer occurrences,
// the 1.5 s backoff and the 4 s the retry gets are virtual time.
func TestRetryNotStarvedBehindHundredHeldRuns(t *testing.T) {
	synctest.Test(t, retryNotStarvedBehindHundredHeldRuns)
}

// retryNotStarvedBehindHundredHeldRuns is TestRetryNotStarvedBehindHundredHeldRuns
// inside its bubble.
func retryNotStarvedBehindHundredHeldRuns(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	var seen perInstant
	p := RetryPolicy{Max: 3, Backoff: 1500 * time.Millisecond, MaxBackoff: 10 * time.Second}
	s := startJob(t, b, "a", Job{Name: "flaky", Schedule: "0 0 1 1 *", LeaseTTL: 300 * time.Millisecond, Retry: p,
		Func: func(_ context.Context, r Run) error { seen.add(r); return errFlaky }})
	e := s.jobs["flaky"]
	occur := func(at time.Time) {
		s.runs.Add(1)
		go func() { defer s.runs.Done(); s.occur(s.loopCtx, e, at) }()
	}
	base := backend.Instant(time.Now()).Add(-time.Second)
	occur(base)
	eventually.True(t, 5*time.Second, "the first occurrence ran", func() bool { return len(seen.get(base)) > 0 })
	failedAt := time.Now()
	time.Sleep(400 * time.Millisecond)
	for i := 1; i <= 120; i++ { // newer occurrences, failing too
		occur(base.Add(time.Duration(i) * time.Millisecond))
	}
	// The retry is due 1.5 s after the failure; the lease lapses then and
	// the sweep (every 20 ms) reclaims. 4 s is generous.
	if eventually.Within(time.Until(failedAt.Add(4*time.Second)), func() bool { return len(seen.get(base)) >= 2 }) {
		return
	}
	r, _ := b.GetRun(context.Background(), LedgerJob(s.cfg.namespace, "flaky"), base)
	t.Fatalf("occurrence %s: its retry was due %v after its failure, and %v later it has not run (attempts seen %d; ledger: %s attempt %d expired %v): the sweeper sees only the 100 newest running records",
		base.Format(time.RFC3339Nano), p.Backoff, time.Since(failedAt).Round(time.Millisecond), len(seen.get(base)), r.State, r.Attempt, r.Expired)
}

// TestHeldRetriesLeaveClaimSlots (found by review; the bug it shows): a failed attempt held for its
// retry counts as "in flight" on its instance until its lease lapses, so
// maxInflight (256) held failures make the scheduler skip every new
// occurrence as "claims are falling behind the schedule" — although the
// backend is fast and the job would now succeed — for up to the whole
// backoff.
//
// It runs in a synctest bubble: the 2 s a new on-time occurrence gets
// beside the held failures is virtual time.
func TestHeldRetriesLeaveClaimSlots(t *testing.T) {
	synctest.Test(t, heldRetriesLeaveClaimSlots)
}

// heldRetriesLeaveClaimSlots is TestHeldRetriesLeaveClaimSlots
// inside its bubble.
func heldRetriesLeaveClaimSlots(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	var seen perInstant
	var mu sync.Mutex
	healthy := false
	p := RetryPolicy{Max: 1, Backoff: time.Hour}
	s := startJob(t, b, "a", Job{Name: "flaky", Schedule: "0 0 1 1 *", LeaseTTL: time.Second, Retry: p,
		Func: func(_ context.Context, r Run) error {
			seen.add(r)
			mu.Lock()
			defer mu.Unlock()
			if !healthy {
				return errFlaky
			}
			return nil
		}})
	e := s.jobs["flaky"]
	base := backend.Instant(time.Now()).Add(-2 * time.Second)
	for i := range maxInflight {
		s.due(s.loopCtx, e, base.Add(time.Duration(i)*time.Millisecond))
	}
	if !eventually.Within(20*time.Second, func() bool { return seen.total() >= maxInflight }) {
		t.Fatalf("only %d of %d failing occurrences ran", seen.total(), maxInflight)
	}
	mu.Lock()
	healthy = true // the dependency is back
	mu.Unlock()
	next := backend.Instant(time.Now())
	s.due(s.loopCtx, e, next)
	if !eventually.Within(2*time.Second, func() bool { return len(seen.get(next)) > 0 }) {
		r, err := b.GetRun(context.Background(), LedgerJob(s.cfg.namespace, "flaky"), next)
		t.Fatalf("a new on-time occurrence was not run while %d failed attempts wait for their retry (ledger: %v %v): held retries count as claims in flight",
			e.inflight.Load(), r.State, err)
	}
}

// TestPausedJobIsNotRetried (found by review; the bug it shows): a pause "stops claims" and the README
// calls every retry a new attempt, a reclaim "run by whichever instance
// reclaims it first" — but the sweeper ignores a pause, so a paused job's
// failed occurrence goes on starting fresh attempts after the pause, up
// to Retry.Max of them (100 × up to 24 h of backoff), which is what an
// operator pausing a failing job wants to stop.
func TestPausedJobIsNotRetried(t *testing.T) {
	synctest.Test(t, pausedJobIsNotRetried)
}

// pausedJobIsNotRetried is TestPausedJobIsNotRetried inside a synctest
// bubble: the 1.5 s after the pause (five backoffs, 75 sweeps) are
// virtual time, so every retry the code would start has started when it
// asserts, however loaded the machine.
func pausedJobIsNotRetried(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	var l attemptLog
	p := RetryPolicy{Max: 3, Backoff: 300 * time.Millisecond, MaxBackoff: 300 * time.Millisecond}
	s := startJob(t, b, "a", Job{Name: "flaky", Schedule: "0 0 1 1 *", LeaseTTL: 100 * time.Millisecond, Retry: p, Func: l.job(-1)})
	at := backend.Instant(time.Now())
	s.runs.Add(1)
	go func() { defer s.runs.Done(); s.occur(s.loopCtx, s.jobs["flaky"], at) }()
	eventually.True(t, 5*time.Second, "attempt 1 ended", func() bool {
		seen, _ := l.snapshot()
		return len(seen) > 0 && !seen[0].end.IsZero()
	})
	if err := s.Pause(context.Background(), "flaky"); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	time.Sleep(1500 * time.Millisecond) // virtual
	synctest.Wait()
	seen, _ := l.snapshot()
	var after []int
	for _, a := range seen {
		if a.start.After(pausedAt) {
			after = append(after, a.attempt)
		}
	}
	if len(after) > 0 {
		t.Fatalf("job paused after attempt 1 failed; attempts %v of the occurrence started after the pause", after)
	}
}

// TestRetryNotBeforeItsBackoff (found by review; the bug it shows): with a backoff shorter than the lease
// TTL, holdForRetry returns at once and the lease lapses when the last
// heartbeat's lease ends — which may be well before the backoff is over
// (the last heartbeat was up to TTL/3 before the failure). The retry then
// starts before its backoff, which the package's own checkAttempts rules
// out ("after the previous one's backoff").
//
// It runs in a synctest bubble: attempt 1's 600 ms (after the first
// heartbeat, before the second) and the 900 ms backoff are virtual time,
// so load cannot move the failure past the second heartbeat.
func TestRetryNotBeforeItsBackoff(t *testing.T) {
	synctest.Test(t, retryNotBeforeItsBackoff)
}

// retryNotBeforeItsBackoff is TestRetryNotBeforeItsBackoff
// inside its bubble.
func retryNotBeforeItsBackoff(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	var l attemptLog
	p := RetryPolicy{Max: 1, Backoff: 900 * time.Millisecond, MaxBackoff: 900 * time.Millisecond}
	inner := l.job(1)
	s := startJob(t, b, "a", Job{Name: "flaky", Schedule: "0 0 1 1 *", LeaseTTL: time.Second, Retry: p,
		Func: func(ctx context.Context, r Run) error {
			if r.Attempt == 1 {
				time.Sleep(600 * time.Millisecond) // fails after its first heartbeat (at 333 ms), before its second
			}
			return inner(ctx, r)
		}})
	at := backend.Instant(time.Now())
	s.occur(s.loopCtx, s.jobs["flaky"], at)
	waitRun(t, b, LedgerJob(s.cfg.namespace, "flaky"), at, 10*time.Second, "the occurrence finished", func(r backend.Run) bool { return r.State.Finished() })
	checkAttempts(t, &l, 2, p)
}
