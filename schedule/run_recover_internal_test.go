package schedule

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// slowReclaim holds every Reclaim until release is closed, counting how
// many of them are in flight at once, and counts the sweeps' listings.
type slowReclaim struct {
	backend.Backend
	release chan struct{}

	mu             sync.Mutex
	inflight, most int
	lists          int
}

func (b *slowReclaim) Reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	b.mu.Lock()
	b.inflight++
	b.most = max(b.most, b.inflight)
	b.mu.Unlock()
	defer func() { b.mu.Lock(); b.inflight--; b.mu.Unlock() }()
	select {
	case <-b.release:
	case <-ctx.Done():
		return backend.Grant{}, backend.Run{}, ctx.Err()
	}
	return b.Backend.Reclaim(ctx, req)
}

func (b *slowReclaim) ListRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	b.mu.Lock()
	b.lists++
	b.mu.Unlock()
	return b.Backend.ListRuns(ctx, f)
}

func (b *slowReclaim) counts() (inflight, most, lists int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inflight, b.most, b.lists
}

// TestSlowReclaimIsNotStartedAgainBySweeps: each sweep found the dead
// runner's occurrence expired and started another recovery of it while
// the first was still waiting on a slow backend — ten a second at the
// default sweep, each with its retries. On a loaded backend this retry
// storm kept every operation slow, so every claim arrived past its misfire
// grace and nothing ran for the rest of the chaos run (issue 23). One
// recovery of an occurrence at a time per scheduler.
func TestSlowReclaimIsNotStartedAgainBySweeps(t *testing.T) {
	const ttl = 200 * time.Millisecond
	mem := memory.New()
	defer mem.Close()
	sb := &slowReclaim{Backend: mem, release: make(chan struct{})}
	s, err := New(sb, WithInstance("a"), WithSweepEvery(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan Run, 4)
	err = s.Register(Job{Name: "crashy", Schedule: "0 0 1 1 *", LeaseTTL: ttl, Crash: CrashRetry, MaxAttempts: 3,
		Func: func(ctx context.Context, r Run) error { ran <- r; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	at := backend.Instant(time.Now().Add(-time.Second))
	dead := backend.Owner{Instance: "dead", Nonce: backend.NewNonce()}
	if _, err := mem.Claim(ctx, backend.ClaimRequest{Job: "crashy", ScheduledAt: at, Owner: dead, TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(ctx)
	// The first recovery waits in Reclaim; let ten more sweeps see the
	// occurrence expired meanwhile.
	var lists int
	eventually.True(t, 30*time.Second, "a reclaim in flight", func() bool { n, _, l := sb.counts(); lists = l; return n > 0 })
	eventually.True(t, 30*time.Second, "ten more sweeps", func() bool { _, _, l := sb.counts(); return l >= lists+10 })
	if _, most, _ := sb.counts(); most != 1 {
		t.Errorf("%d recoveries of one occurrence were in flight at once on one scheduler, want 1", most)
	}
	close(sb.release)
	select {
	case r := <-ran:
		if r.Attempt != 2 {
			t.Errorf("the recovery ran attempt %d, want 2", r.Attempt)
		}
	case <-ctx.Done():
		t.Fatal("the occurrence's recovery never ran")
	}
}
