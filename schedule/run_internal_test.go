package schedule

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

// unreachableHeartbeats is a ledger whose heartbeats fail (not refused:
// unreachable), recording the deadline of each heartbeat's context and
// when the claim was sent.
type unreachableHeartbeats struct {
	backend.Backend

	mu        sync.Mutex
	claimSent time.Time
	deadlines []time.Time
}

func (u *unreachableHeartbeats) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	u.mu.Lock()
	u.claimSent = time.Now()
	u.mu.Unlock()
	return u.Backend.Claim(ctx, req)
}

func (u *unreachableHeartbeats) Heartbeat(ctx context.Context, _ backend.HeartbeatRequest) error {
	d, _ := ctx.Deadline()
	u.mu.Lock()
	u.deadlines = append(u.deadlines, d)
	u.mu.Unlock()
	return errors.New("connection refused")
}

// TestRunDeadlineHonoursDriftAndMargin: a run's deadline is the
// Scheduler's WithDrift/WithMargin deadline, the one locks use — not a
// hard-coded one. Heartbeats are cut at that deadline (the default timing
// would let them run to the next heartbeat, later), and the run learns its
// lease is lost.
func TestRunDeadlineHonoursDriftAndMargin(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	b := &unreachableHeartbeats{Backend: mem}
	const (
		ttl    = 3 * time.Second
		drift  = 0.2
		margin = time.Second
	)
	span := time.Duration(float64(ttl)*(1-drift)) - margin // 1.4 s; the default timing gives 2.82 s
	s, err := New(b, WithInstance("a"), WithDrift(drift), WithMargin(margin))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	if err := s.Register(Job{Name: "drifting", Schedule: "0 0 1 1 *", LeaseTTL: ttl,
		Func: func(ctx context.Context, r Run) error {
			// LeaseLost closes just before the context is cancelled.
			select {
			case <-r.LeaseLost():
				<-ctx.Done()
			case <-time.After(30 * time.Second):
			}
			got <- context.Cause(ctx)
			return nil
		}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	go s.occur(s.loopCtx, s.jobs["drifting"], backend.Instant(time.Now()))
	cause := <-got
	if !errors.Is(cause, leasehold.ErrLeaseLost) {
		t.Fatalf("the run's context ended with %v, want ErrLeaseLost", cause)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.deadlines) == 0 {
		t.Fatal("no heartbeat was sent before the deadline")
	}
	limit := b.claimSent.Add(span)
	for i, d := range b.deadlines {
		if d.IsZero() || d.After(limit) {
			t.Fatalf("heartbeat %d may run until %v, past the run's deadline %v (claim sent + TTL × (1 − %v) − %v)", i, d, limit, drift, margin)
		}
	}
}

func TestLeaseTimingIsValidated(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{leasehold.WithDrift(0.5), "WithDrift(0.5)"},
		{leasehold.WithDrift(-0.1), "WithDrift(-0.1)"},
		{leasehold.WithMargin(-time.Second), "WithMargin(-1s)"},
	} {
		_, err := New(mem, tc.opt)
		if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New = %v, want ErrInvalid naming %q", err, tc.want)
		}
	}
	// A margin that leaves a job's lease no room for a heartbeat (every
	// TTL/3) before the deadline is refused at Register, naming the job.
	s, err := New(mem, leasehold.WithMargin(700*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Register(Job{Name: "tight", Schedule: "* * * * *", LeaseTTL: time.Second, Func: func(context.Context, Run) error { return nil }})
	if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), `"tight"`) || !strings.Contains(err.Error(), "lease ttl 1s") {
		t.Fatalf("Register = %v, want ErrInvalid naming the job and its lease ttl", err)
	}
	// As every other invalid field of a job: a *FieldError naming it (the
	// daemon maps it to its config key).
	if fe := (*FieldError)(nil); !errors.As(err, &fe) || fe.Field != "LeaseTTL" {
		t.Fatalf("Register = %v (%T), want a *FieldError for LeaseTTL", err, err)
	}
	if err := s.Register(Job{Name: "roomy", Schedule: "* * * * *", LeaseTTL: 10 * time.Second, Func: func(context.Context, Run) error { return nil }}); err != nil {
		t.Fatalf("a lease with room is refused: %v", err)
	}
}
