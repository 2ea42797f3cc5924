package schedule

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

// TestTimedOutJobNeverRunsBesideItself (issue 15 item 2): a job that
// ignores its context after its timeout is still running, so its lease
// must be held until its function has returned. The heartbeats stopped at
// the timeout; another instance reclaimed the occurrence once the lease
// expired and ran attempt 2 beside attempt 1.
func TestTimedOutJobNeverRunsBesideItself(t *testing.T) {
	const ttl = 300 * time.Millisecond
	mem := memory.New()
	t.Cleanup(func() { mem.Close() }) // after the schedulers stop
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		mu               sync.Mutex
		running, overlap int
		attempts         []int
	)
	returned := make(chan struct{}, 10)
	job := func(ctx context.Context, r Run) error {
		mu.Lock()
		running++
		if running > 1 {
			overlap++
		}
		attempts = append(attempts, r.Attempt)
		mu.Unlock()
		defer func() {
			mu.Lock()
			running--
			mu.Unlock()
			returned <- struct{}{}
		}()
		<-ctx.Done()        // the timeout
		time.Sleep(6 * ttl) // ... ignored for twice the lease
		return context.Cause(ctx)
	}
	var scheds []*Scheduler
	for _, name := range []string{"a", "b"} {
		scheds = append(scheds, startJob(t, mem, name, Job{Name: "slow", Schedule: "0 0 1 1 *", LeaseTTL: ttl,
			Timeout: 100 * time.Millisecond, Crash: CrashRetry, MaxAttempts: 3, Func: job}))
	}
	at := backend.Instant(time.Now())
	go scheds[0].occur(scheds[0].loopCtx, scheds[0].jobs["slow"], at)
	select {
	case <-returned:
	case <-time.After(20 * time.Second):
		t.Fatal("the job never returned")
	}
	// Give a reclaim every chance it would have had: the sweep runs every
	// 20 ms, and attempt 1's lease (if still heartbeated) ends 300 ms after
	// it returned; wait until the ledger settles.
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := mem.GetRun(ctx, "slow", at)
		if err == nil && r.State.Finished() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the occurrence never finished: %+v, %v", r, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if overlap > 0 || len(attempts) > 1 {
		t.Fatalf("attempts %v ran, %d of them beside another: the lease lapsed while attempt 1 still ran", attempts, overlap)
	}
	if r, _ := mem.GetRun(ctx, "slow", at); r.State != backend.Failed || r.Attempt != 1 {
		t.Fatalf("ledger: %s attempt %d, want failed (timeout) attempt 1", r.State, r.Attempt)
	}
}
