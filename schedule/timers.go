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
// ended (it was stopped meanwhile).
func (s *Scheduler) addTimer(e *entry, cursor time.Time) {
	h := s.timers
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.ctx.Err() != nil || e.slot >= 0 {
		return
	}
	if !s.setNext(e, cursor) {
		return
	}
	heap.Push(h, e)
	if e.slot == 0 {
		h.poke()
	}
}

// remove takes e out of the heap; once it returns, e is not handled
// again.
func (h *timerHeap) remove(e *entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.slot >= 0 {
		heap.Remove(h, e.slot)
	}
}

func (h *timerHeap) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// setNext sets e's next instant after cursor, and reports false (logging
// it) when the schedule has none.
func (s *Scheduler) setNext(e *entry, cursor time.Time) bool {
	e.cursor, e.next = cursor, e.spec.Next(cursor)
	if e.next.IsZero() {
		s.cfg.logger.Warn("schedule has no further occurrences", "job", e.job.Name)
		return false
	}
	return true
}

// timerLoop waits for the earliest next instant and handles each entry
// that came due, until ctx ends. The wait is re-computed on every wake-up
// (the clock may have been stepped), as a job's own sleep was.
func (s *Scheduler) timerLoop(ctx context.Context) {
	h := s.timers
	for {
		h.mu.Lock()
		for len(h.items) > 0 && ctx.Err() == nil {
			e := h.items[0]
			now := s.cfg.clock.Now()
			if e.next.After(now) {
				break
			}
			s.fire(e, now)
			if s.setNext(e, e.cursor) {
				heap.Fix(h, 0)
			} else {
				heap.Pop(h)
			}
		}
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
