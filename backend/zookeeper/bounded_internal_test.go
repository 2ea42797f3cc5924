package zookeeper

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// TestAbandonedCallHoldsTheOwnersNext: a call whose context ends before
// its requests return is abandoned, not stopped; the owner's next call
// waits for it, and fails not sent (ErrNotApplied) if its own context ends
// first; another owner's call does not wait. Once every abandoned call has
// returned, none is left registered (a crowd of calls whose contexts end
// as their requests return, in every interleaving the scheduler makes).
func TestAbandonedCallHoldsTheOwnersNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &Backend{abandoned: map[backend.Nonce][]chan struct{}{}}
		a, other := backend.NewNonce(), backend.NewNonce()
		reply := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(time.Second); cancel() }()
		if b.bounded(ctx, a, func() { <-reply }) {
			t.Fatal("a call whose requests had not returned was not abandoned when its context ended")
		}
		if err := b.waitAbandoned(context.Background(), other); err != nil {
			t.Fatalf("another owner's call waited for an abandoned one: %v", err)
		}
		short, stop := context.WithTimeout(context.Background(), time.Second)
		defer stop()
		err := b.waitAbandoned(short, a)
		if !errors.Is(err, backend.ErrNotApplied) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the owner's next call, its context ended while the abandoned one ran: %v, want ErrNotApplied and the deadline", err)
		}
		waited := make(chan error, 1)
		go func() { waited <- b.waitAbandoned(context.Background(), a) }()
		synctest.Wait()
		select {
		case err := <-waited:
			t.Fatalf("the owner's next call went ahead (%v) while the abandoned one ran", err)
		default:
		}
		close(reply)
		if err := <-waited; err != nil {
			t.Fatalf("the owner's next call after the abandoned one returned: %v", err)
		}
		if b.bounded(context.Background(), a, func() {}) != true {
			t.Fatal("a call whose context never ends was abandoned")
		}
	})

	// Contexts ending as the requests return, on real time.
	b := &Backend{abandoned: map[backend.Nonce][]chan struct{}{}}
	n := backend.NewNonce()
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			d := time.Duration(i%5) * 50 * time.Microsecond
			go func() { time.Sleep(d); cancel() }()
			b.bounded(ctx, n, func() { time.Sleep(d) })
		})
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.waitAbandoned(ctx, n); err != nil {
		t.Fatalf("abandoned calls that all returned are still waited for: %v", err)
	}
	b.mu.Lock()
	left := len(b.abandoned)
	b.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d owners still have abandoned calls registered after all returned", left)
	}
}
