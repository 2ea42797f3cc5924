package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend/memory"
)

func ExampleNewLocker() {
	// Any backend works; memory is the one-process reference backend.
	lk, err := leasehold.NewLocker(memory.New(), leasehold.WithInstance("worker-1"), leasehold.WithNamespace("prod/billing"))
	if err != nil {
		panic(err)
	}
	fmt.Println(lk.Instance(), lk.Namespace())
	// Output: worker-1 prod/billing
}

func ExampleLocker_Acquire() {
	ctx := context.Background()
	lk, _ := leasehold.NewLocker(memory.New())

	lock, err := lk.Acquire(ctx, "reports/daily") // blocks until acquired or ctx ends
	if err != nil {
		panic(err)
	}
	defer lock.Release(ctx)

	// Work under lock.Context(): it is cancelled if the lease is lost.
	select {
	case <-lock.Done():
		fmt.Println("lost:", context.Cause(lock.Context()))
	default:
		fmt.Println("holding reports/daily with token", lock.Token())
	}
	// Output: holding reports/daily with token 1
}

func ExampleLocker_TryAcquire() {
	ctx := context.Background()
	b := memory.New()
	a, _ := leasehold.NewLocker(b, leasehold.WithInstance("a"))
	c, _ := leasehold.NewLocker(b, leasehold.WithInstance("c"))

	held, _ := a.TryAcquire(ctx, "queue/consumer")
	_, err := c.TryAcquire(ctx, "queue/consumer")
	fmt.Println(errors.Is(err, leasehold.ErrLockNotAcquired))
	_ = held.Release(ctx)
	again, err := c.TryAcquire(ctx, "queue/consumer")
	fmt.Println(err, again.Token() > held.Token())
	// Output:
	// true
	// <nil> true
}

func ExampleLocker_Do() {
	lk, _ := leasehold.NewLocker(memory.New())
	err := lk.Do(context.Background(), "cache/warm", func(ctx context.Context, token leasehold.Token) error {
		fmt.Println("warming the cache under token", token)
		return nil
	})
	fmt.Println(err)
	// Output:
	// warming the cache under token 1
	// <nil>
}

// fencedStore is a resource that protects itself with fencing tokens: it
// remembers the highest token it has seen and rejects writes with lower ones.
// This, not the lock alone, is what stops a holder that was paused past its
// lease from overwriting the next holder's work.
type fencedStore struct {
	mu      sync.Mutex
	highest leasehold.Token
	value   string
}

func (s *fencedStore) Write(token leasehold.Token, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest {
		return fmt.Errorf("stale token %d < %d", token, s.highest)
	}
	s.highest, s.value = token, v
	return nil
}

func ExampleToken() {
	ctx := context.Background()
	b := memory.New()
	store := &fencedStore{}
	old, _ := leasehold.NewLocker(b, leasehold.WithInstance("old"))
	next, _ := leasehold.NewLocker(b, leasehold.WithInstance("next"))

	l1, _ := old.TryAcquire(ctx, "report")
	stale := l1.Token()
	_ = l1.Release(ctx) // imagine instead: paused past its TTL, the lease expired
	l2, _ := next.TryAcquire(ctx, "report")
	fmt.Println(store.Write(l2.Token(), "from next"))
	fmt.Println(store.Write(stale, "from old, late"))
	fmt.Println(store.value)
	// Output:
	// <nil>
	// stale token 1 < 2
	// from next
}

func ExampleElector_Run() {
	ctx, cancel := context.WithCancel(context.Background())
	el, _ := leasehold.NewElector(memory.New(), "queue-consumer", leasehold.Callbacks{
		OnElected: func(t leasehold.Token) { fmt.Println("elected with token", t) },
		OnDemoted: func() { fmt.Println("demoted") },
	}, leasehold.WithInstance("node-a"))

	err := el.Run(ctx, func(leaderCtx context.Context) error {
		fmt.Println("consuming as leader")
		cancel() // e.g. shutdown; a lost lease cancels leaderCtx too
		<-leaderCtx.Done()
		return nil
	})
	fmt.Println("Run returned", err)
	// Output:
	// elected with token 1
	// consuming as leader
	// demoted
	// Run returned <nil>
}

func ExampleElector_Leader() {
	ctx := context.Background()
	b := memory.New()
	el, _ := leasehold.NewElector(b, "scheduler", leasehold.Callbacks{}, leasehold.WithInstance("node-a"))
	_, err := el.Leader(ctx)
	fmt.Println(errors.Is(err, leasehold.ErrNoLeader))

	started := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- el.Run(ctx, func(leaderCtx context.Context) error {
			close(started)
			<-leaderCtx.Done()
			return nil
		})
	}()
	<-started
	ld, _ := el.Leader(ctx)
	fmt.Println(ld.Identity, ld.Token)
	_ = el.Resign(ctx) // returns once the leader's work has stopped and the role is free
	fmt.Println(<-done)
	// Output:
	// true
	// node-a 1
	// <nil>
}
