package schedule

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Instants handed back at re-registration. A job's timer (or its start-up
// catch-up) dispatches an instant and moves its cursor past it before the
// instant is settled: its claim may still wait on its jitter delay, in the
// catch-up queue behind a running occurrence, or on a backend that is slow
// to answer. Remove (and Replace) stops the job there, and a job registered
// again with the same schedule continues from the cursor — so such an
// instant is handed back instead: the job registered again claims it (hostile
// review, finding (b): it was claimed by nobody, and no misfire was
// recorded).

// stoppedTimer is where a removed job's timer stopped.
type stoppedTimer struct {
	version string
	cursor  time.Time
	waiting []*waiting // dispatched before cursor, not settled at Remove
}

// stopEntry stops e's timer, waiting for its start-up work to end; s.mu is
// held. Once it returns, e claims nothing more.
func (s *Scheduler) stopEntry(e *entry) {
	if e.cancel != nil {
		e.cancel()
		<-e.done
		s.timers.remove(e)
		e.cancel = nil
		s.timers.mu.Lock()
		cursor := e.cursor
		s.timers.mu.Unlock()
		if cursor.IsZero() {
			cursor = e.resume // stopped before its timer started
		}
		if !cursor.IsZero() {
			if s.removed == nil {
				s.removed = map[string]stoppedTimer{}
			}
			// Claims still under way may settle after this: a settled
			// instant is marked done, and the job registered again skips
			// it (or, if it already took it, the ledger lets one claim
			// win).
			waiting := e.waits.pending()
			if len(waiting) > 0 {
				s.cfg.logger.Info("job stopped with instants not claimed yet; they are claimed if it is registered again with the same schedule",
					"job", e.job.Name, "count", len(waiting), "first", waiting[0].at)
			}
			s.removed[e.job.Name] = stoppedTimer{version: e.spec.Version(), cursor: cursor, waiting: waiting}
		}
	}
}

// resumeCursor returns where the timer of job name, stopped by Remove or
// Replace, left off if its schedule was spec's, with the instants it had
// dispatched whose claims had not settled (handed) — or, if its schedule
// was another, those instants as dropped — and forgets it; s.mu is held.
// A job removed and registered again (the daemon does so while its
// instance id is lost, after a pause past the id's TTL, and at a reload
// that changes the job) thus loses no instant: those that came due
// meanwhile, and those that waited on their jitter delay or in the
// catch-up queue at Remove, are on time or misfires by the job's policy,
// as after a pause of a job that stayed registered.
func (s *Scheduler) resumeCursor(name string, spec *Spec) (cursor time.Time, handed, dropped []*waiting) {
	st, ok := s.removed[name]
	if !ok {
		return time.Time{}, nil, nil
	}
	delete(s.removed, name)
	if st.version != spec.Version() {
		return time.Time{}, nil, st.waiting // another schedule: its instants count from now
	}
	return st.cursor, st.waiting, nil
}

// waiting is one instant of a job, dispatched and not yet settled.
type waiting struct {
	at      time.Time
	catchUp bool // claimed by the misfire policy (may start late)
	// done: settled — claimed, refused, recorded as a misfire or skipped by
	// a policy — or given up for good: nothing more is owed to it. Set by
	// whichever registration's claim settled it.
	done atomic.Bool

	mu     sync.Mutex
	claims int           // claims of it under way (claimWaiting)
	idle   chan struct{} // closed when claims drops to 0, if asked for
	drawn  bool          // delay and sendAt are set
	delay  time.Duration // the jitter delay drawn for it
	sendAt time.Time     // when that delay ends, on the scheduler's clock
}

// enter and leave bracket a claim of w.
func (w *waiting) enter() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.claims++
}

func (w *waiting) leave() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.claims--; w.claims == 0 && w.idle != nil {
		close(w.idle)
		w.idle = nil
	}
}

// claimsEnded returns a channel closed once no claim of w is under way.
func (w *waiting) claimsEnded() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.claims == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	if w.idle == nil {
		w.idle = make(chan struct{})
	}
	return w.idle
}

// jitter returns w's jitter delay and how much of it is left at now,
// drawing it (below limit) the first time. A delay drawn under a longer
// jitter (the job registered again with a shorter one) is cut to limit, and
// its end moved as much earlier.
func (w *waiting) jitter(limit time.Duration, now time.Time) (delay, left time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.drawn {
		w.drawn = true
		if limit > 0 {
			w.delay = rand.N(limit)
		}
		w.sendAt = now.Add(w.delay)
	}
	if w.delay > limit {
		w.sendAt = w.sendAt.Add(limit - w.delay)
		w.delay = limit
	}
	return w.delay, max(0, w.sendAt.Sub(now))
}

// late returns how late w is at now, less its jitter delay if one was
// drawn (jitter is not lateness).
func (w *waiting) late(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return now.Sub(w.at) - w.delay
}

// waitSet holds an entry's waiting instants.
type waitSet struct {
	mu    sync.Mutex
	items map[*waiting]struct{}
}

func (ws *waitSet) add(w *waiting) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.items == nil {
		ws.items = map[*waiting]struct{}{}
	}
	ws.items[w] = struct{}{}
}

// settle marks w done and forgets it.
func (ws *waitSet) settle(w *waiting) {
	w.done.Store(true)
	ws.forget(w)
}

// forget drops w from the set, leaving it as it is (another registration's
// set may hold it).
func (ws *waitSet) forget(w *waiting) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	delete(ws.items, w)
}

// pending returns the instants not settled, oldest first.
func (ws *waitSet) pending() []*waiting {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	var out []*waiting
	for w := range ws.items {
		if !w.done.Load() {
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b *waiting) int { return a.at.Compare(b.at) })
	return out
}

// takeBack dispatches the instants handed back by the job's previous
// registration (e.handed), as its timer would have: catch-up instants go
// back to the catch-up queue; an on-time instant is claimed, its jitter
// delay continued, if it is still within the misfire grace (less that
// delay) — else the misfire policy applies to it, as to any instant the
// timer finds late. An instant the previous registration's claim settled
// meanwhile (a claim under way at Remove) is left alone; one under way
// still may be considered by both, which is safe: the ledger lets one
// claim win. It runs before e's timer starts, so the instants keep their
// order.
func (s *Scheduler) takeBack(ctx context.Context, e *entry) {
	handed := e.handed
	e.handed = nil
	if len(handed) == 0 || ctx.Err() != nil {
		return // stopped again: still in e.waits, handed back again
	}
	now := s.cfg.clock.Now()
	var late lateSet
	var onTime []*waiting
	for _, w := range handed {
		switch {
		case w.done.Load():
			e.waits.forget(w)
		case w.catchUp && e.job.Misfire != MisfireSkip:
			e.queue.push(s, ctx, e, w)
		case w.catchUp || w.late(now) > e.job.MisfireGrace:
			// Late — a catch-up instant handed to a job whose policy is
			// now skip too (hostile review: the queue ran those minutes
			// late, under skip).
			e.waits.settle(w) // the misfire policy decides on it
			late.n++
			late.latest = append(late.latest, w.at)
			if len(late.latest) > e.job.MaxCatchUp {
				late.latest = late.latest[1:]
			}
		default:
			onTime = append(onTime, w)
		}
	}
	s.cfg.logger.Info("claiming the instants handed back when the job was last removed", "job", e.job.Name,
		"handed back", len(handed), "late", late.n)
	if late.n > 0 {
		s.misfire(ctx, e, late, now)
	}
	for _, w := range onTime {
		s.dispatch(ctx, e, w)
	}
}

// dropHanded reports the instants handed back by the job's previous
// registration that the job registered again does not claim (e.dropped,
// taken by the caller):
// they were due under another schedule (or the job now runs on every
// instance, unclaimed), and come due here no longer. They are recorded as
// misfires, skipped — once the previous registration's claims of them
// ended: one that was under way at Remove may still have won its
// instant and run it (hostile review: such an instant was reported
// skipped, and ran). It waits until ctx ends at most.
func (s *Scheduler) dropHanded(ctx context.Context, e *entry, dropped []*waiting) {
	var n int
	var last time.Time
	for _, w := range dropped {
		select {
		case <-w.claimsEnded():
		case <-ctx.Done():
			return
		}
		if !w.done.Load() {
			n++
			last = w.at
		}
	}
	if n == 0 {
		return
	}
	s.cfg.logger.Warn("instants were waiting to be claimed when the job was removed; registered again with another schedule (or mode), it does not claim them: skipped",
		"job", e.job.Name, "count", n, "last", last)
	s.emit(Event{Kind: EventMisfire, Job: e.job.Name, ScheduledAt: last, Count: n, Result: string(MisfireSkip)})
}
