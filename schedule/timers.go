package schedule

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// The job timers. One goroutine (timerLoop) waits for the earliest next
// instant of all registered jobs, kept in a heap, and handles every job
// that came due; a job's start-up work (recording its schedule version,
// catching up) runs once, in a goroutine that ends when it is done, at most
// startupWorkers at a time. An idle scheduler therefore holds one timer
// and no goroutine per job, whatever the number of jobs, and the burst of
// start-up reads is bounded.

// startupWorkers bounds how many jobs do their start-up backend work at
// once.
const startupWorkers = 8

// timerHeap holds the entries waiting for their next instant, earliest
// first. Its lock is held while a due entry is handled, so an entry
// removed (remove returned) is never handled again. It never takes s.mu
// (stopEntry removes entries under s.mu).
type timerHeap struct {
	mu    sync.Mutex
	items []*entry
	wake  chan struct{} // the earliest instant changed
}

func newTimerHeap() *timerHeap { return &timerHeap{wake: make(chan struct{}, 1)} }

func (h *timerHeap) Len() int           { return len(h.items) }
func (h *timerHeap) Less(i, j int) bool { return h.items[i].next.Before(h.items[j].next) }
func (h *timerHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].slot, h.items[j].slot = i, j
}
func (h *timerHeap) Push(x any) { e := x.(*entry); e.slot = len(h.items); h.items = append(h.items, e) }
func (h *timerHeap) Pop() any {
	n := len(h.items) - 1
	e := h.items[n]
	h.items[n], h.items = nil, h.items[:n]
	e.slot = -1
	return e
}

// addTimer schedules e for the first instant after cursor, unless its context
// ended (it was stopped meanwhile). The instant is computed before the heap
// lock is taken: Spec.Next never runs under it.
func (s *Scheduler) addTimer(e *entry, cursor time.Time) {
	next, ok := s.nextAfter(e, cursor)
	if !ok {
		return
	}
	h := s.timers
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.ctx.Err() != nil || e.slot >= 0 {
		return
	}
	e.cursor, e.next = cursor, next
	heap.Push(h, e)
	if e.slot == 0 {
		h.poke()
	}
}

// remove takes e out of the heap and waits for a handling of e under way
// (timerLoop takes due entries out of the heap to handle them); once it
// returns, e is not handled again if its context ended before.
func (h *timerHeap) remove(e *entry) {
	h.mu.Lock()
	if e.slot >= 0 {
		heap.Remove(h, e.slot)
	}
	h.mu.Unlock()
	e.firing.Lock()
	//lint:ignore SA2001 waits for a fire in progress
	e.firing.Unlock()
}

func (h *timerHeap) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// nextAfter returns e's first instant after cursor, and reports false
// (logging it) when the schedule has none.
func (s *Scheduler) nextAfter(e *entry, cursor time.Time) (time.Time, bool) {
	next := e.spec.Next(cursor)
	if next.IsZero() {
		s.cfg.logger.Warn("schedule has no further occurrences", "job", e.job.Name)
		return next, false
	}
	return next, true
}

// timerLoop waits for the earliest next instant and handles each entry
// that came due, until ctx ends. The wait is re-computed on every wake-up
// (the clock may have been stepped), as a job's own sleep was. Due entries
// are taken out of the heap and handled — their instants enumerated, their
// next one computed — without the heap lock, then put back: a schedule
// slow to compute delays its own job, not the lock every other job's
// timer (and Register, Remove) needs.
func (s *Scheduler) timerLoop(ctx context.Context) {
	h := s.timers
	var due []*entry
	for ctx.Err() == nil {
		h.mu.Lock()
		now := s.cfg.clock.Now()
		due = due[:0]
		for len(h.items) > 0 && !h.items[0].next.After(now) {
			e := heap.Pop(h).(*entry)
			e.firing.Lock() // before the heap lock is let go: remove waits for it
			due = append(due, e)
		}
		h.mu.Unlock()
		for _, e := range due {
			var next time.Time
			ok := e.ctx.Err() == nil && ctx.Err() == nil
			if ok {
				s.fire(e, now)
				next, ok = s.nextAfter(e, e.cursor)
			}
			h.mu.Lock()
			if ok && e.ctx.Err() == nil && e.slot < 0 {
				e.next = next
				heap.Push(h, e)
			}
			h.mu.Unlock()
			e.firing.Unlock()
		}
		if len(due) > 0 {
			continue // handling took time: look again before waiting
		}
		h.mu.Lock()
		var timer <-chan time.Time
		if len(h.items) > 0 {
			timer = s.cfg.clock.After(h.items[0].next.Sub(s.cfg.clock.Now()))
		}
		h.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-timer:
		case <-h.wake:
		}
	}
}

// fire handles e's instants that came due by now (its next instant, and
// any others since, after a pause or a clock step): on-time ones are
// claimed, late ones go to the misfire policy. It sets e.cursor to the
// latest of them. It must not block.
func (s *Scheduler) fire(e *entry, now time.Time) {
	onTime, late, cur := s.dueSince(e, e.next, now)
	e.cursor = cur
	if late.n > 0 {
		s.misfire(e.ctx, e, late, now)
	}
	for _, at := range onTime {
		s.due(e.ctx, e, at)
	}
}
