package schedule

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

// slowClaimReply applies Claim at once and delivers its reply after delay.
type slowClaimReply struct {
	backend.Backend
	delay time.Duration
}

func (b *slowClaimReply) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	g, err := b.Backend.Claim(ctx, req)
	if req.Job == "slow" {
		time.Sleep(b.delay)
	}
	return g, err
}

// liveAtStart reports, from the job's first instant, whether the backend
// still held the run's lease for it: a job must never start on a claim the
// backend may already have expired (and may have granted again).
func liveAtStart(mem *memory.Backend, ch chan<- error) Func {
	return func(ctx context.Context, r Run) error {
		got, err := mem.GetRun(context.Background(), r.Job, r.ScheduledAt)
		switch {
		case err != nil:
			ch <- err
		case got.State != backend.Running || got.Expired || got.Token != uint64(r.Token):
			ch <- fmt.Errorf("the job started while the ledger says %s, expired %v, token %d (ours %d)", got.State, got.Expired, got.Token, r.Token)
		default:
			ch <- nil
		}
		return nil
	}
}

// TestSlowClaimReplyNeverRunsExpired: a claim whose reply arrives after the
// runner's deadline (counted from the send time) is confirmed by a
// heartbeat before the job starts, or not run: the backend may already
// have expired it.
func TestSlowClaimReplyNeverRunsExpired(t *testing.T) {
	const ttl = 300 * time.Millisecond
	mem := memory.New()
	t.Cleanup(func() { mem.Close() }) // after the schedulers stop
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	started := make(chan error, 10)

	t.Run("Scheduler", func(t *testing.T) {
		startJob(t, &slowClaimReply{Backend: mem, delay: 2 * ttl}, "a", Job{Name: "slow", Schedule: "@every 1s", LeaseTTL: ttl, Func: liveAtStart(mem, started)})
		select {
		case err := <-started:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the job never ran")
		}
	})
	t.Run("ClaimOccurrence", func(t *testing.T) {
		at := backend.Instant(time.Now().Add(-time.Second))
		c, err := ClaimOccurrence(ctx, &slowClaimReply{Backend: mem, delay: 2 * ttl}, "slow", at, ClaimOptions{Instance: "a", TTL: ttl})
		// The claim expired before the reply: the confirming heartbeat finds
		// it lost, so the only right answer is a refusal.
		if !errors.Is(err, leasehold.ErrOutcomeIndeterminate) {
			if c != nil {
				c.Finish(ctx, nil)
			}
			t.Fatalf("ClaimOccurrence with its reply past the lease: claim %v, %v; want ErrIndeterminate", c != nil, err)
		}
	})
}
