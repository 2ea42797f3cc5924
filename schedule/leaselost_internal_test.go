package schedule

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

// stalledHeartbeats is a ledger whose heartbeats never get an answer (a
// partition from the runner's side): the lease runs out.
type stalledHeartbeats struct{ backend.Backend }

func (stalledHeartbeats) Heartbeat(ctx context.Context, _ backend.HeartbeatRequest) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestLeaseLostAfterTimeout: a job still stopping after its timeout ended
// its context learns through Run.LeaseLost that its lease ran out — the
// moment it must be gone, since another instance may now run the
// occurrence.
func TestLeaseLostAfterTimeout(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	type seen struct {
		cause    error
		lost     bool
		lostLate time.Duration // after the claim's lease TTL, by this host's clock
	}
	got := make(chan seen, 1)
	const ttl = 600 * time.Millisecond
	s := startJob(t, stalledHeartbeats{mem}, "a", Job{Name: "stopping", Schedule: "0 0 1 1 *", LeaseTTL: ttl, Timeout: 50 * time.Millisecond,
		Func: func(ctx context.Context, r Run) error {
			start := time.Now()
			<-ctx.Done()
			cause := context.Cause(ctx)
			select {
			case <-r.LeaseLost():
				got <- seen{cause: cause, lost: true, lostLate: time.Since(start) - ttl}
			case <-time.After(20 * time.Second):
				got <- seen{cause: cause}
			}
			return cause
		}})
	at := backend.Instant(time.Now())
	go s.occur(s.loopCtx, s.jobs["stopping"], at)
	g := <-got
	if !errors.Is(g.cause, ErrJobTimeout) || !g.lost {
		t.Fatalf("context ended by %v, lease lost seen: %v; want the timeout, then LeaseLost closed", g.cause, g.lost)
	}
	if g.lostLate >= 0 {
		t.Fatalf("LeaseLost closed %v after the lease's TTL from the job's start: it must close before the backend can expire the lease", g.lostLate)
	}
}
