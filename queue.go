package leasehold

import (
	"context"
	"sync"

	"github.com/leasehold/leasehold/backend"
)

// localQueue lines up the goroutines of one Locker that block in Acquire on
// the same key, so that at most one of them at a time asks the backend: the
// others could only be told "held" (by a goroutine of this very process),
// and a crowd of them (10,000 goroutines on 100 keys) would fill the
// connection pool with requests that cannot succeed, delaying the ones that
// can. A goroutine keeps its place until its Acquire fails or the lock it
// got is released or lost; the next one then asks the backend. Waiting in
// the queue sends nothing, so a context that ends there is simply "not
// acquired". TryAcquire and leader campaigns do not queue.
type localQueue struct {
	mu sync.Mutex
	m  map[string]*localSlot
}

type localSlot struct {
	turn chan struct{} // capacity 1: full while a goroutine has the turn
	refs int           // goroutines waiting for or holding the turn
}

// enter waits for key's turn, or returns backend.NotSent(ctx): ctx.Err(),
// with its cause quoted but not matched (a context ended by a lost lock
// must not make this call's "not acquired" read as a loss of its own).
// The returned func gives the turn up; it may be called more than once.
func (q *localQueue) enter(ctx context.Context, key string) (func(), error) {
	q.mu.Lock()
	if q.m == nil {
		q.m = make(map[string]*localSlot)
	}
	s := q.m[key]
	if s == nil {
		s = &localSlot{turn: make(chan struct{}, 1)}
		q.m[key] = s
	}
	s.refs++
	q.mu.Unlock()
	select {
	case s.turn <- struct{}{}:
		var once sync.Once
		return func() {
			once.Do(func() {
				<-s.turn
				q.drop(key, s)
			})
		}, nil
	case <-ctx.Done():
		q.drop(key, s)
		return nil, backend.NotSent(ctx)
	}
}

func (q *localQueue) drop(key string, s *localSlot) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if s.refs--; s.refs == 0 {
		delete(q.m, key)
	}
}
