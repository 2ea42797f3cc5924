package schedule

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

// TestLeaseDeadlineFollowsHeartbeats: Run.LeaseDeadline starts at the
// claim's deadline, and each confirmed heartbeat moves it later and closes
// the channel it returned — what a command's supervisor is told.
func TestLeaseDeadlineFollowsHeartbeats(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	s, err := New(mem, WithInstance("a"))
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 600 * time.Millisecond
	type moved struct{ before, after time.Time }
	got := make(chan []moved, 1)
	if err := s.Register(Job{Name: "follow", Schedule: "0 0 1 1 *", LeaseTTL: ttl,
		Func: func(ctx context.Context, r Run) error {
			var ms []moved
			d, ch := r.LeaseDeadline()
			if d.IsZero() || ch == nil || time.Until(d) > ttl {
				t.Errorf("first deadline %v (in %v), channel %v; want one within the TTL", d, time.Until(d), ch)
			}
			for len(ms) < 3 {
				select {
				case <-ch:
				case <-time.After(30 * time.Second):
					got <- ms
					return nil
				}
				var nd time.Time
				nd, ch = r.LeaseDeadline()
				ms = append(ms, moved{d, nd})
				d = nd
			}
			got <- ms
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
	go s.occur(s.loopCtx, s.jobs["follow"], backend.Instant(time.Now()))
	ms := <-got
	if len(ms) < 3 {
		t.Fatalf("the deadline moved %d times in 30 s; want 3 (heartbeats every %v)", len(ms), ttl/3)
	}
	for i, m := range ms {
		if !m.after.After(m.before) {
			t.Fatalf("move %d: %v → %v; want later", i, m.before, m.after)
		}
	}
}
