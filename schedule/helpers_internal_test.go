package schedule

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// startJob starts a Scheduler named instance on b (sweeping every 20 ms)
// with job registered, and shuts it down when the test ends.
func startJob(t *testing.T, b backend.Backend, instance string, job Job) *Scheduler {
	t.Helper()
	s, err := New(b, WithInstance(instance), WithSweepEvery(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Register(job); err != nil {
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
	return s
}
