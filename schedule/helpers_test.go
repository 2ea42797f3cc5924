// Helpers shared by the package's external tests.

package schedule_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/schedule"
)

// effects is what jobs themselves wrote: the test compares it with the
// schedule, never the ledger with itself.
type effects struct {
	mu   sync.Mutex
	runs map[int64][]schedule.Run // by ScheduledAt (ms)
}

func newEffects() *effects { return &effects{runs: map[int64][]schedule.Run{}} }

func (f *effects) add(r schedule.Run) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := r.ScheduledAt.UnixMilli()
	f.runs[k] = append(f.runs[k], r)
}

func (f *effects) get(at time.Time) []schedule.Run {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]schedule.Run(nil), f.runs[at.UnixMilli()]...)
}

func (f *effects) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.runs)
}

func (f *effects) instants() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ks []int64
	for k := range f.runs {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

func newScheduler(t *testing.T, b backend.Backend, name string, opts ...schedule.Option) *schedule.Scheduler {
	t.Helper()
	s, err := schedule.New(b, append([]schedule.Option{schedule.WithInstance(name), schedule.WithSweepEvery(50 * time.Millisecond), schedule.WithVersionSettle(time.Second), schedule.WithClaimTolerance(100 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func start(t *testing.T, s *schedule.Scheduler) {
	t.Helper()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
}

// deadRunner claims an occurrence the way a runner that then dies would:
// with a short lease and no heartbeats.
func deadRunner(t *testing.T, b backend.Backend, job string, at time.Time) backend.Grant {
	t.Helper()
	g, err := b.Claim(context.Background(), backend.ClaimRequest{
		Job: job, ScheduledAt: at, Owner: backend.Owner{Instance: "dead", Nonce: backend.NewNonce()},
		TTL: 150 * time.Millisecond, SpecVersion: "dead",
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

type atomicCounter struct {
	mu sync.Mutex
	v  int
}

func (c *atomicCounter) add(d int) int { c.mu.Lock(); defer c.mu.Unlock(); c.v += d; return c.v }
func (c *atomicCounter) get() int      { c.mu.Lock(); defer c.mu.Unlock(); return c.v }
func (c *atomicCounter) max(v int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v > c.v {
		c.v = v
	}
}
