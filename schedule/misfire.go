package schedule

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
)

// maxDueScan bounds how many instants one wake-up enumerates one by one;
// past it the scan jumps ahead (a forward clock step of a day on a job due
// every 10 ms would be 8.6 million instants).
const maxDueScan = 10000

// lateSet is the misfired instants of one wake-up: how many there were,
// and the latest MaxCatchUp of them, oldest first.
type lateSet struct {
	n      int
	latest []time.Time
}

// dueSince returns the instants from at (due) up to now, split into those
// within the misfire grace (oldest first) and the misfired rest, and the
// latest of all (the job timer's new cursor). There is more than one when this
// process did not look for a while: it was paused, starved, or its clock
// stepped forward. Instants older than the misfire window are left out, as
// catch-up leaves them; of the misfired ones only the latest MaxCatchUp are
// kept, and a scan past maxDueScan instants jumps ahead, so neither memory
// nor time grows with the length of the gap.
func (s *Scheduler) dueSince(e *entry, at, now time.Time) (onTime []time.Time, late lateSet, cursor time.Time) {
	grace := e.job.MisfireGrace
	if w := now.Add(-e.job.MisfireWindow); at.Before(w) {
		if n := e.spec.Next(w.Add(-time.Millisecond)); !n.IsZero() && !n.After(now) {
			late.n++ // at itself, and what lies before the window, are counted once
			at = n
		}
	}
	first, scanned := at, 0
	for t := at; !t.IsZero() && !t.After(now); t = e.spec.Next(t) {
		cursor = t
		if now.Sub(t) <= grace {
			onTime = append(onTime, t)
			continue
		}
		late.n++
		late.latest = append(late.latest, t)
		if len(late.latest) > e.job.MaxCatchUp {
			late.latest = late.latest[1:]
		}
		if scanned++; scanned == maxDueScan {
			// Jump to a few gaps before the grace, by the mean gap so far.
			gap := t.Sub(first) / time.Duration(scanned)
			if skip := now.Add(-grace - gap*time.Duration(e.job.MaxCatchUp+2)); gap > 0 && skip.After(t) {
				late.n += int(skip.Sub(t) / gap)
				t = skip
			}
		}
	}
	if cursor.IsZero() {
		cursor = at
	}
	return onTime, late, cursor
}

// misfire applies the job's misfire policy to instants that came due late:
// skip forgets them, run-once claims the latest of them, run-all claims
// each of the latest MaxCatchUp. Catch-up runs one after another through
// the job's queue, and on-time instants that come due meanwhile wait in it
// behind them, so that runs keep their order. Every-instance jobs have no
// catch-up: their late instants are always skipped.
func (s *Scheduler) misfire(ctx context.Context, e *entry, late lateSet, now time.Time) {
	if len(late.latest) == 0 {
		s.cfg.logger.Warn("an occurrence came due later than the misfire window; skipped", "job", e.job.Name, "now", now, "window", e.job.MisfireWindow)
		s.emit(Event{Kind: EventMisfire, Job: e.job.Name, ScheduledAt: now, Count: late.n, Result: string(MisfireSkip)})
		return
	}
	last := late.latest[len(late.latest)-1]
	policy := e.job.Misfire
	if e.job.Mode == EveryInstance {
		policy = MisfireSkip
	}
	s.cfg.logger.Warn("occurrences came due later than the misfire grace (this process was paused, starved or its clock stepped forward)",
		"job", e.job.Name, "count", late.n, "first kept", late.latest[0], "last", last, "now", now,
		"grace", e.job.MisfireGrace, "policy", policy)
	s.emit(Event{Kind: EventMisfire, Job: e.job.Name, ScheduledAt: last, Count: late.n, Result: string(policy)})
	if e.job.Mode == Leader && !s.leading.is() {
		return
	}
	switch policy {
	case MisfireRunOnce:
		e.queue.push(s, ctx, e, &waiting{at: last, catchUp: true})
	case MisfireRunAll:
		for _, at := range late.latest {
			e.queue.push(s, ctx, e, &waiting{at: at, catchUp: true})
		}
	}
}

// catchUp handles occurrences that passed while no instance claimed them,
// by the job's misfire policy. It reads the job's high-water mark (latest
// claimed instant), which pruning history never lowers.
func (s *Scheduler) catchUp(ctx context.Context, e *entry, now time.Time) {
	if e.job.Misfire == MisfireSkip {
		return
	}
	hw, ver, err := s.l.HighWater(ctx, e.job.Name)
	if err != nil {
		s.cfg.logger.Warn("reading the high-water mark failed; no catch-up", "job", e.job.Name, "err", err)
		return
	}
	if hw.IsZero() {
		return // never ran anywhere: nothing was missed
	}
	from := hw
	if strings.HasPrefix(ver, TriggerVersionPrefix) {
		// The mark is a triggered run's instant, which says nothing of the
		// scheduled occurrences before it: start after the latest scheduled
		// run instead.
		from = s.lastScheduled(ctx, e, hw, now.Add(-e.job.MisfireWindow))
	}
	if w := now.Add(-e.job.MisfireWindow); w.After(from) {
		from = w
	}
	var missed []time.Time
	for at := e.spec.Next(from); !at.IsZero() && !at.After(now); at = e.spec.Next(at) {
		missed = append(missed, at)
		if len(missed) > e.job.MaxCatchUp {
			missed = missed[1:] // keep the latest
		}
	}
	if len(missed) == 0 {
		return
	}
	if e.job.Misfire == MisfireRunOnce {
		missed = missed[len(missed)-1:]
	}
	for _, at := range missed {
		e.queue.push(s, ctx, e, &waiting{at: at, catchUp: true})
	}
}

// runQueue runs one job's catch-up claims one after another — the rate
// bound of catch-up — and the on-time instants that came due meanwhile
// after them. It holds at most MaxCatchUp catch-up instants (the latest:
// start-up catch-up and a late wake-up together cannot exceed it) and
// maxInflight in all. Its instants are in the entry's waits until their
// claims settle: if the job is removed, those left are handed back.
type runQueue struct {
	mu      sync.Mutex
	pending []*waiting
	running bool
	current bool // a catch-up instant is being claimed or run (it counts)
}

func (q *runQueue) busy() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running
}

// push appends it and starts the queue's goroutine if it is idle.
func (q *runQueue) push(s *Scheduler, ctx context.Context, e *entry, it *waiting) {
	e.waits.add(it)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = append(q.pending, it)
	catchUps := 0
	if q.current {
		catchUps++
	}
	for _, p := range q.pending {
		if p.catchUp {
			catchUps++
		}
	}
	for i := 0; i < len(q.pending) && (catchUps > e.job.MaxCatchUp || len(q.pending) > maxInflight); {
		if q.pending[i].catchUp || len(q.pending) > maxInflight {
			if q.pending[i].catchUp {
				catchUps--
			}
			// Drop the oldest: settled, by the bound.
			e.waits.settle(q.pending[i])
			q.pending = append(q.pending[:i], q.pending[i+1:]...)
			continue
		}
		i++
	}
	if q.running {
		return
	}
	q.running = true
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		for {
			q.mu.Lock()
			q.current = false
			if len(q.pending) == 0 || ctx.Err() != nil {
				// Stopped: what is left stays in e.waits, handed back.
				q.pending, q.running = nil, false
				q.mu.Unlock()
				return
			}
			it := q.pending[0]
			q.pending, q.current = q.pending[1:], it.catchUp
			q.mu.Unlock()
			switch {
			case it.done.Load():
				// Handed back, and settled meanwhile by the claim of the
				// job's previous registration.
				e.waits.forget(it)
			case it.catchUp:
				s.cfg.logger.Info("catching up a missed occurrence", "job", e.job.Name, "at", it.at)
				s.claimWaiting(context.WithValue(ctx, catchUpKey{}, true), e, it)
			default:
				s.claimWaiting(ctx, e, it)
			}
		}
	}()
}

// skipMisfired records a claim won later than the misfire grace, under
// policy skip, as failed without running it: the occurrence is claimed
// (nobody else runs it) and the record says why it did not run. If the
// record cannot be written, the run's lease expires and the crash policy
// applies to it, as to any runner that died before recording.
func (s *Scheduler) skipMisfired(e *entry, req backend.ClaimRequest, g backend.Grant, sent time.Time, late time.Duration) {
	msg := fmt.Sprintf("misfire: the claim was won %v later than the misfire grace %v; not run (misfire policy skip)", late.Round(time.Millisecond), e.job.MisfireGrace)
	s.cfg.logger.Warn("occurrence misfired: its claim was won later than the misfire grace; recorded as failed, not run",
		"job", e.job.Name, "at", req.ScheduledAt, "late by", late, "grace", e.job.MisfireGrace)
	s.emit(Event{Kind: EventMisfire, Job: e.job.Name, ScheduledAt: req.ScheduledAt, Token: leasehold.Token(g.Token), Count: 1, Result: string(e.job.Misfire)})
	out := backend.Outcome{State: backend.Failed, Error: msg}
	if err := finishRun(context.Background(), s.l, req.Job, req.ScheduledAt, req.Owner, g.Token, out, sent.Add(s.cfg.lease.span(g.TTL)), g.TTL); err != nil {
		s.cfg.logger.Warn("recording a misfired occurrence failed; the crash policy applies to it", "job", e.job.Name, "at", req.ScheduledAt, "err", err)
	}
}
