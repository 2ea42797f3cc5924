package schedule

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

// failingFinish refuses the first n Finish calls without applying them, as
// a backend does during a short outage.
type failingFinish struct {
	backend.Backend
	mu       sync.Mutex
	n, calls int
}

func (b *failingFinish) Finish(ctx context.Context, req backend.FinishRequest) error {
	b.mu.Lock()
	if req.Job != "once" { // schedule versions are recorded through Finish too
		b.mu.Unlock()
		return b.Backend.Finish(ctx, req)
	}
	b.calls++
	fail := b.calls <= b.n
	b.mu.Unlock()
	if fail {
		return errors.New("injected: connection refused")
	}
	return b.Backend.Finish(ctx, req)
}

// TestFinishRetriedUntilLeaseEnds (issue 14 item 7): a Finish that fails
// must be retried while the run's lease lasts, not given up after a few
// tries: a run left "running" is taken for a crash, and under crash policy
// retry a job that succeeded runs again. Here Finish fails 10 times in a
// row (about 1.3 s of retries, where the old code gave up after 6 tries in
// 0.3 s) within a 3 s lease; the outcome must still be recorded, and the
// occurrence run once.
func TestFinishRetriedUntilLeaseEnds(t *testing.T) {
	const ttl = 3 * time.Second
	mem := memory.New()
	t.Cleanup(func() { mem.Close() }) // after the schedulers stop
	fb := &failingFinish{Backend: mem, n: 10}
	ran := make(chan Run, 100)
	startJob(t, fb, "a", Job{Name: "once", Schedule: "@every 2s", LeaseTTL: ttl, Crash: CrashRetry, MaxAttempts: 3,
		Func: func(ctx context.Context, r Run) error { ran <- r; return nil }})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var first Run
	select {
	case first = <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the job never ran")
	}
	deadline := time.Now().Add(4 * ttl)
	for {
		r, err := mem.GetRun(ctx, "once", first.ScheduledAt)
		if err != nil {
			t.Fatal(err)
		}
		if r.State == backend.Succeeded {
			if r.Attempt != 1 {
				t.Fatalf("the occurrence succeeded as attempt %d: the first run's outcome was lost and the job ran again", r.Attempt)
			}
			break
		}
		if time.Now().After(deadline) {
			fb.mu.Lock()
			calls := fb.calls
			fb.mu.Unlock()
			t.Fatalf("%v after the run, with %d Finish calls, the ledger says %s (attempt %d), want succeeded", 4*ttl, calls, r.State, r.Attempt)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for {
		select {
		case r := <-ran:
			if r.ScheduledAt.Equal(first.ScheduledAt) {
				t.Fatalf("occurrence %v ran again (attempt %d)", r.ScheduledAt, r.Attempt)
			}
			continue
		default:
		}
		break
	}
}

// TestClaimFinishRetried: the same for Claim.Finish (ClaimOccurrence, used
// by the adapters and triggers).
func TestClaimFinishRetried(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	fb := &failingFinish{Backend: mem, n: 10}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	at := backend.Instant(time.Now().Add(-time.Second))
	c, err := ClaimOccurrence(ctx, fb, "once", at, ClaimOptions{Instance: "a", TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Finish(ctx, nil); err != nil {
		t.Fatalf("Finish after 10 refused attempts within the lease: %v", err)
	}
	if r, err := mem.GetRun(ctx, "once", at); err != nil || r.State != backend.Succeeded {
		t.Fatalf("ledger: %s, %v; want succeeded", r.State, err)
	}
}
