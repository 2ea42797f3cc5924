package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/attempt"
	"github.com/leasehold/leasehold/internal/keeper"
)

// leaseTiming is a run's lease timing, kept by internal/keeper as for
// locks: heartbeats every TTL/3; the run's context is cancelled at the send
// time of the last successful claim/heartbeat + TTL × (1 − drift) − margin.
// A zero margin is the default for the run's TTL, min(TTL/20, 500 ms).
type leaseTiming struct {
	drift  float64
	margin time.Duration
}

// defaultLease is the timing of a Scheduler or Claim without WithDrift or
// WithMargin.
var defaultLease = leaseTiming{drift: keeper.DefaultDrift}

// of is the timing of a lease of ttl.
func (t leaseTiming) of(ttl time.Duration) keeper.Timing {
	m := t.margin
	if m == 0 {
		m = keeper.DefaultMargin(ttl)
	}
	return keeper.Timing{Drift: t.drift, Margin: m}
}

// span is how long after a confirmed claim or heartbeat's send time a run
// whose lease is ttl may trust it.
func (t leaseTiming) span(ttl time.Duration) time.Duration { return t.of(ttl).Span(ttl) }

// check validates the timing, and against a lease of ttl: the deadline must
// leave room for a heartbeat (every ttl/3) before it.
func (t leaseTiming) check(ttl time.Duration) error {
	if err := (keeper.Timing{Drift: t.drift, Margin: t.margin}).Validate(); err != nil {
		return fmt.Errorf("%w: %w", leasehold.ErrInvalid, err)
	}
	if safe := t.span(ttl); safe <= ttl/3 {
		return fmt.Errorf("%w: lease ttl %v leaves a runner's deadline of %v after drift %v and margin %v, not more than the heartbeat interval %v",
			leasehold.ErrInvalid, ttl, safe, t.drift, t.of(ttl).Margin, ttl/3)
	}
	return nil
}

func (s *Scheduler) runContext(e *entry) (context.Context, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(s.jobCtx)
	if e.job.Timeout > 0 {
		cause := fmt.Errorf("%w after %v", ErrJobTimeout, e.job.Timeout)
		t := time.AfterFunc(e.job.Timeout, func() { cancel(cause) })
		context.AfterFunc(ctx, func() { t.Stop() })
	}
	return ctx, cancel
}

// stoppedError is the error recorded for a run that returned err after
// its context was cancelled by its timeout or by shutdown: err, wrapped
// so that it says why (a job that returns ctx.Err() says only "context
// canceled"). A nil err stays nil: the job did its work, late.
func stoppedError(ctx context.Context, err error) error {
	cause := context.Cause(ctx)
	if err == nil || ctx.Err() == nil || !(errors.Is(cause, ErrJobTimeout) || errors.Is(cause, ErrSchedulerShutdown)) || errors.Is(err, cause) {
		return err
	}
	return fmt.Errorf("%w: %w", cause, err)
}

// safeCall runs fn, turning a panic into an error, and saying in its
// error why its context ended (stoppedError).
func safeCall(ctx context.Context, fn Func, r Run) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("job %q panicked: %v", r.Job, p)
		}
	}()
	return stoppedError(ctx, fn(ctx, r))
}

// execute runs a won claim: heartbeats keep its lease while the job runs,
// and the outcome is recorded with Finish.
func (s *Scheduler) execute(e *entry, r Run, owner backend.Owner, g backend.Grant, sent time.Time) {
	r.Token = leasehold.Token(g.Token)
	var result string
	r.result = &result
	r.leaseLost = make(chan struct{})
	r.lease = &runLease{deadline: sent.Add(s.cfg.lease.span(g.TTL)), changed: make(chan struct{})}
	log := s.cfg.logger.With("job", r.Job, "at", r.ScheduledAt, "token", g.Token, "attempt", r.Attempt)
	ctx, cancel := s.runContext(e)
	// Heartbeats go on until the job's function has returned — not until
	// its context ends (timeout, shutdown): a job that is slow to stop is
	// still running, and a lapsed lease would let another instance run the
	// occurrence beside it. Losing the lease cancels the job's context.
	hbCtx, hbStop := context.WithCancel(context.WithoutCancel(ctx))
	hbDone := make(chan struct{})
	var (
		last   time.Time // send time of the last confirmed claim or heartbeat
		hbLost bool      // the heartbeats found the lease lost (read after hbDone)
	)
	go func() {
		defer close(hbDone)
		last = heartbeat(hbCtx, s.cfg.lease, func(cause error) { hbLost = true; close(r.leaseLost); cancel(cause) }, s.l, r, owner, g, sent)
	}()
	start := time.Now()
	err := safeCall(ctx, e.job.Func, r)
	took := time.Since(start)
	hbStop()
	<-hbDone
	lost := hbLost || errors.Is(context.Cause(ctx), leasehold.ErrLeaseLost)
	cancel(nil)

	out := backend.Outcome{State: backend.Succeeded, Duration: took, Result: result}
	if err != nil {
		out.State, out.Error = backend.Failed, err.Error()
	}
	s.emitRun(r, took, err)
	if err != nil && !lost && e.job.Retry.retries(r.Attempt) {
		actx, acancel := context.WithTimeout(context.WithoutCancel(s.loopCtx), g.TTL/3)
		if rerr := s.recordAttempt(actx, r, owner, out); rerr != nil {
			log.Warn("recording the failed attempt's error failed; its retry goes ahead", "err", rerr)
		}
		acancel()
		s.holdForRetry(e, r, owner, g, last, log.With("err", err))
		return
	}
	switch ferr := finishRun(context.Background(), s.l, r.Job, r.ScheduledAt, owner, g.Token, out, last.Add(s.cfg.lease.span(g.TTL)), g.TTL); {
	case ferr == nil && err != nil:
		log.Warn("run failed", "state", out.State, "took", took, "err", err)
	case ferr == nil:
		log.Info("run finished", "state", out.State, "took", took)
	case errors.Is(ferr, backend.ErrLeaseLost):
		lost = true
	default:
		log.Error("recording the outcome failed until the run's lease ended; if it was not recorded, the crash policy applies to it", "err", ferr, "state", out.State)
	}
	if lost {
		log.Warn("run's lease was lost; another instance may run this occurrence again (crash policy)")
		s.emit(Event{Kind: EventRunLost, Job: r.Job, ScheduledAt: r.ScheduledAt, Token: r.Token, Attempt: r.Attempt})
		if e.job.OnLost != nil {
			e.job.OnLost(r)
		}
	}
}

// heartbeat renews the run's lease until ctx ends (internal/keeper), and
// calls lost with an error wrapping ErrLeaseLost when the lease is lost or
// its deadline passes unconfirmed; lost has returned when heartbeat does.
// It returns the send time of the last confirmed claim or heartbeat.
func heartbeat(ctx context.Context, t leaseTiming, lost func(cause error), b backend.Ledger, r Run, owner backend.Owner, g backend.Grant, sent time.Time) (last time.Time) {
	ttl := g.TTL
	var k *keeper.Keeper
	k = keeper.Start(keeper.Config{
		Timing: t.of(ttl), Every: ttl / 3, AttemptTimeout: ttl / 3,
		Renew: func(ctx context.Context) (time.Duration, error) {
			return ttl, b.Heartbeat(ctx, backend.HeartbeatRequest{Job: r.Job, ScheduledAt: r.ScheduledAt, Owner: owner, Token: g.Token, TTL: ttl})
		},
		IsLost: func(err error) bool { return errors.Is(err, backend.ErrLeaseLost) },
		Lost: func(err error) {
			why := "deadline passed without a confirmed heartbeat"
			if !errors.Is(err, keeper.ErrDeadline) {
				why = err.Error()
			}
			lost(fmt.Errorf("%w: job %q at %s token %d: %s", leasehold.ErrLeaseLost, r.Job, r.ScheduledAt.Format(time.RFC3339Nano), g.Token, why))
		},
		Renewed: func(time.Duration) {
			if r.lease != nil {
				r.lease.set(k.Deadline()) // Renewed is called from Run, after Start returned k
			}
		},
	}, sent, ttl)
	k.Run(ctx)
	k.Stop()
	return k.Last()
}

// runLease is a run's lease deadline, for Run.LeaseDeadline.
type runLease struct {
	mu       sync.Mutex
	deadline time.Time
	changed  chan struct{} // closed and replaced when deadline moves
}

func (l *runLease) get() (time.Time, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline, l.changed
}

func (l *runLease) set(d time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deadline = d
	close(l.changed)
	l.changed = make(chan struct{})
}

// finishRun records a run's outcome. A failure is retried, with backoff,
// until the run's lease deadline (until) — and for at least a heartbeat
// interval (ttl/3) even when that deadline has passed, since a lost
// heartbeat reply is no lost lease and Finish is guarded by owner and token
// on the backend. A run left "running" is taken for a crash once its lease
// expires, and under crash policy retry a job that succeeded would run
// again. A retry after an attempt whose outcome is unknown may find the run
// already finished by that attempt: the ledger is read to tell it from a
// lost lease. It returns nil once the outcome is recorded, an error
// wrapping backend.ErrLeaseLost when the run is no longer ours,
// leasehold.ErrIndeterminate when an attempt may have recorded it but no
// answer settled it in time, or the last error.
func finishRun(ctx context.Context, l backend.Ledger, job string, at time.Time, owner backend.Owner, token uint64, out backend.Outcome, until time.Time, ttl time.Duration) error {
	end := until
	if least := time.Now().Add(ttl / 3); end.Before(least) {
		end = least
	}
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	what := fmt.Sprintf("finish %s@%s token %d", job, at.Format(time.RFC3339Nano), token)
	backoff, unknown := 10*time.Millisecond, false
	for {
		err := l.Finish(ctx, backend.FinishRequest{Job: job, ScheduledAt: at, Owner: owner, Token: token, Outcome: out})
		switch {
		case err == nil:
			return nil
		case errors.Is(err, backend.ErrLeaseLost) && unknown:
			return finishedByUs(ctx, l, job, at, owner, token, out, what, err)
		case errors.Is(err, backend.ErrLeaseLost), errors.Is(err, backend.ErrInvalid):
			return err
		case errors.Is(err, backend.ErrClosed) && unknown:
			return fmt.Errorf("%w: %s: an earlier attempt may have recorded it: %w", leasehold.ErrOutcomeIndeterminate, what, err)
		case errors.Is(err, backend.ErrClosed):
			return err
		}
		unknown = unknown || !errors.Is(err, backend.ErrNotApplied)
		if sleep(ctx, backoff) != nil {
			if unknown {
				return fmt.Errorf("%w: %s: %w", leasehold.ErrOutcomeIndeterminate, what, err)
			}
			return fmt.Errorf("%s: %w", what, err)
		}
		backoff = min(backoff*2, 200*time.Millisecond)
	}
}

// finishedByUs reads the ledger after a Finish was refused as lost
// following an attempt whose outcome is unknown: the run finished by that
// attempt (our owner, token and state) is recorded, anything else is lost.
// Reads are retried until ctx ends; then the outcome is indeterminate.
func finishedByUs(ctx context.Context, l backend.Ledger, job string, at time.Time, owner backend.Owner, token uint64, out backend.Outcome, what string, lost error) error {
	backoff := 10 * time.Millisecond
	for {
		r, err := l.GetRun(ctx, job, at)
		if err == nil {
			if r.Owner == owner && r.Token == token && r.State == out.State {
				return nil // the earlier attempt was applied
			}
			return lost
		}
		if errors.Is(err, backend.ErrClosed) || sleep(ctx, backoff) != nil {
			return fmt.Errorf("%w: %s: refused as lost after an attempt whose outcome is unknown, and the ledger could not be read: %w",
				leasehold.ErrOutcomeIndeterminate, what, err)
		}
		backoff = min(backoff*2, 200*time.Millisecond)
	}
}

// sleep waits d or until ctx ends (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// recoverRun applies the crash policy to a running occurrence whose
// runner's lease expired.
func (s *Scheduler) recoverRun(ctx context.Context, e *entry, r backend.Run) {
	_ = s.recover(ctx, e, r, false)
}

// recover is recoverRun, or, with retry, the retry of a failed run whose
// backoff ended (retryWhenDue), on the instance that held it: then it is
// logged and reported as a retry (EventRetry), not as a runner that died,
// and its occurrence's recovery guard is already held (held through the
// backoff, so that this instance's sweep leaves it to the retry). It
// returns the Reclaim's error (nil when it ran the occurrence or did not
// try).
func (s *Scheduler) recover(ctx context.Context, e *entry, r backend.Run, retry bool) error {
	// One recovery of an occurrence at a time here: every sweep (and every
	// losing claim) that finds it expired calls this, and on a slow
	// backend a recovery outlasts many sweeps — starting more would be a
	// retry storm that keeps the backend slow.
	// The guard covers the recovery, not the run it starts: once reclaimed,
	// the run is held by heartbeats like any other, and if its lease is
	// lost while its function is slow to stop, the occurrence's next
	// expiry is a new recovery, not one still in flight.
	key := r.ScheduledAt.UnixNano()
	if !retry && !e.recovering.start(key) {
		return nil
	}
	recovering := true
	defer func() {
		if recovering {
			e.recovering.end(key)
		}
	}()
	log := s.cfg.logger.With("job", r.Job, "at", r.ScheduledAt, "failed attempt", r.Attempt)
	if !retry {
		log = s.cfg.logger.With("job", r.Job, "at", r.ScheduledAt, "dead attempt", r.Attempt, "dead runner", r.Owner.Instance)
	}
	if s.claimsPaused(ctx, r.Job) {
		log.Debug("not recovered while the job is paused")
		return nil // nothing of a paused job runs; a later sweep recovers it after Resume
	}
	if _, _, refused := e.vc.state(); refused {
		return nil // this instance's spec was superseded: current instances recover it
	}
	// r comes from a listing that may be stale (another instance may have
	// reclaimed the occurrence since): r.Attempt is a lower bound, enough
	// to abandon but not to reclaim. The Reclaim below carries the bound,
	// and the ledger judges it on the current record.
	if e.job.Crash == CrashSkip || r.Attempt >= e.job.MaxAttempts {
		s.abandon(ctx, e, r, log)
		return nil
	}
	owner := backend.Owner{Instance: s.cfg.instance, Nonce: backend.NewNonce()}
	version := e.spec.Version()
	if _, ok := IsTriggered(r); ok {
		version = r.SpecVersion // a triggered run stays marked as one
	}
	// The reclaimed attempt runs beside the job's other occurrences: it is
	// held to the job's MaxConcurrent like a claim.
	req := backend.ClaimRequest{Job: r.Job, ScheduledAt: r.ScheduledAt, SpecVersion: version, Owner: owner,
		TTL: e.job.LeaseTTL, MaxRunning: e.job.MaxConcurrent, MaxAttempts: e.job.MaxAttempts}
	// Like a claim, a Reclaim whose outcome is unknown may have been applied
	// (a new owner, attempt+1): retry it with the same nonce, which answers
	// "yours", rather than spend the attempt with nobody running it.
	type reclaimed struct {
		g  backend.Grant
		rr backend.Run
	}
	a := claimAttempt(s.l, s.cfg.lease, req, func(r reclaimed) uint64 { return r.g.Token })
	a.Try = func(ctx context.Context) (reclaimed, time.Duration, error) {
		g, rr, err := s.l.Reclaim(ctx, req)
		return reclaimed{g, rr}, g.TTL, err
	}
	a.Judge = func(err error) attempt.Verdict { return judgeClaim(err, attempt.Refused) }
	backoff, spent := 10*time.Millisecond, 0
	a.Retry = func(ctx context.Context, f attempt.Failure) error {
		switch {
		case f.Verdict == attempt.Unconfirmed:
			log.Warn("reclaimed occurrence could not be confirmed; it is recovered again once its lease expires")
			return f.Err
		case spent >= 10 || ctx.Err() != nil:
			log.Error("reclaim failed; the occurrence is recovered again once its lease expires", "err", f.Err)
			return f.Err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.cfg.clock.After(backoff):
		}
		backoff, spent = min(backoff*2, time.Second), spent+1
		return nil
	}
	res, err := attempt.Run(ctx, a)
	switch {
	case retry && (errors.Is(err, backend.ErrOccurrenceOverlap) || errors.Is(err, backend.ErrLeaseNotExpired)):
		return err // retryWhenDue tries again
	case errors.Is(err, backend.ErrOccurrenceOverlap):
		log.Info("not reclaimed yet: the job is running at its concurrency limit; a later sweep tries again", "err", err)
	case errors.Is(err, backend.ErrOccurrenceExhausted):
		s.abandon(ctx, e, r, log)
	}
	if err != nil {
		return nil // someone else reclaimed it, or it finished meanwhile, or see above
	}
	g, rr := res.Grant.g, res.Grant.rr
	if retry {
		log.Info("retrying a failed occurrence after its backoff", "token", g.Token, "attempt", rr.Attempt)
		s.emit(Event{Kind: EventRetry, Job: r.Job, ScheduledAt: r.ScheduledAt, Token: leasehold.Token(g.Token), Attempt: rr.Attempt})
	} else {
		log.Warn("reclaimed an occurrence whose runner died", "token", g.Token, "attempt", rr.Attempt)
		s.emit(Event{Kind: EventReclaim, Job: r.Job, ScheduledAt: r.ScheduledAt, Token: leasehold.Token(g.Token), Attempt: rr.Attempt})
	}
	recovering = false
	e.recovering.end(key)
	s.execute(e, Run{Job: r.Job, ScheduledAt: r.ScheduledAt, Attempt: rr.Attempt, Instance: s.cfg.instance}, owner, g, res.Base)
	return nil
}

// abandon marks r, a running occurrence whose runner's lease expired, as
// abandoned (crash policy skip, or its attempts exhausted). The ledger
// refuses it if the lease is live again (another instance reclaimed it).
func (s *Scheduler) abandon(ctx context.Context, e *entry, r backend.Run, log *slog.Logger) {
	ar, err := s.l.Abandon(ctx, r.Job, r.ScheduledAt)
	if err != nil {
		return // reclaimed or finished meanwhile, or the ledger failed: a later sweep sees it again
	}
	log.Warn("occurrence abandoned: its runner died", "policy", e.job.Crash, "attempts", ar.Attempt, "max attempts", e.job.MaxAttempts)
	s.emit(Event{Kind: EventAbandon, Job: r.Job, ScheduledAt: r.ScheduledAt, Attempt: ar.Attempt})
}

// inProgress is a set of instants whose work is under way.
type inProgress struct {
	mu sync.Mutex
	at map[int64]bool
}

// start adds at and reports whether it was absent.
func (p *inProgress) start(at int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at[at] {
		return false
	}
	if p.at == nil {
		p.at = map[int64]bool{}
	}
	p.at[at] = true
	return true
}

func (p *inProgress) end(at int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.at, at)
}

// sweepLoop looks for occurrences whose runner died and applies the crash
// policy, every sweepEvery.
func (s *Scheduler) sweepLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.clock.After(s.cfg.sweepEvery):
		}
		s.sweep(ctx)
	}
}

// Sweep paging: the first page's size, and the most pages one sweep reads.
const (
	sweepPage     = 1000
	maxSweepPages = 100
)

// sweep reads the namespace's running records — one listing for all jobs,
// not one per job, so that an idle scheduler's cost does not grow with the
// number of jobs it has — and recovers each expired one of a job
// registered here (every-instance jobs too: their scheduled runs have no
// claim, but their triggered runs do). Every running record is read, a
// page at a time: runs held for a retry stay running through their
// backoff, and more than a page of them must not hide the oldest from
// recovery. Many jobs share instants (every daily job at 03:00), so a page
// ends inside an instant: the next page starts at that instant again and
// skips what was seen, and a page that holds a single instant is widened.
func (s *Scheduler) sweep(ctx context.Context) {
	type occ struct {
		job string
		at  int64 // Unix ms
	}
	var seen map[occ]bool
	f := backend.RunFilter{State: backend.Running, Limit: s.sweepPage}
	for page := 0; page < maxSweepPages && ctx.Err() == nil; page++ {
		runs, err := s.l.ListRuns(ctx, f)
		if err != nil || len(runs) == 0 {
			return
		}
		if seen == nil && len(runs) < f.Limit {
			s.recoverExpired(ctx, runs) // one page: nothing to tell apart
			return
		}
		if seen == nil {
			seen = map[occ]bool{}
		}
		fresh := runs[:0:0]
		for _, r := range runs {
			if k := (occ{r.Job, r.ScheduledAt.UnixMilli()}); !seen[k] {
				seen[k] = true
				fresh = append(fresh, r)
			}
		}
		s.recoverExpired(ctx, fresh)
		if len(runs) < f.Limit {
			return
		}
		last := runs[len(runs)-1].ScheduledAt
		if !runs[0].ScheduledAt.After(last) {
			f.Limit *= 2 // one instant fills the page: widen it
		}
		f.Before = last.Add(time.Millisecond)
	}
}

// recoverExpired starts the recovery of each expired run of a job
// registered here.
func (s *Scheduler) recoverExpired(ctx context.Context, runs []backend.Run) {
	for _, r := range runs {
		if !r.Expired || r.State != backend.Running {
			continue
		}
		s.mu.Lock()
		e := s.jobs[r.Job]
		s.mu.Unlock()
		if e == nil {
			continue // not a job of this scheduler (or a reserved record: versions, pauses)
		}
		s.runs.Add(1)
		go func() { defer s.runs.Done(); s.recoverRun(ctx, e, r) }()
	}
}

// pruneLoop deletes history older than the retention, and expired records,
// at start-up and then hourly, in batches, for at most 10 s each time and
// each.
func (s *Scheduler) pruneLoop(ctx context.Context) {
	for {
		budget, cancel := context.WithTimeout(ctx, 10*time.Second)
		cutoff := s.cfg.clock.Now().Add(-s.cfg.retention)
		start, total := time.Now(), 0
		var err error
		for {
			var n int
			n, err = s.l.Prune(budget, cutoff, 1000)
			total += n
			if err != nil || n < 1000 {
				break
			}
		}
		// Records of history (trigger-key uses, retried attempts) expire
		// with the retention they were written under (recordExpiry); they
		// are pruned whatever became of the runs' pass, in a budget of
		// their own.
		cancel()
		budget, cancel = context.WithTimeout(ctx, 10*time.Second)
		now := s.cfg.clock.Now()
		for {
			n, rerr := s.l.PruneRecords(budget, now, 1000)
			total += n
			if rerr != nil || n < 1000 {
				err = errors.Join(err, rerr)
				break
			}
		}
		cancel()
		s.emit(Event{Kind: EventPrune, Count: total, Duration: time.Since(start), Err: err})
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.clock.After(time.Hour):
		}
	}
}
