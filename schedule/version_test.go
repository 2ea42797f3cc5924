package schedule_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/schedule"
)

// TestClaimsResumeAfterLedgerLost: a Redis without persistence restarted
// empty (here: FLUSHALL) loses the job's schedule version with the rest of
// the ledger; the scheduler records it again and goes on claiming, instead
// of waiting forever for a version nobody records.
func TestClaimsResumeAfterLedgerLost(t *testing.T) {
	srv := testserver.Redis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	b, err := redis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	var runs atomic.Int64
	s := newScheduler(t, b, "i1")
	if err := s.Register(schedule.Job{Name: "tick", Schedule: "@every 100ms",
		Func: func(context.Context, schedule.Run) error { runs.Add(1); return nil }}); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	eventually.True(t, 20*time.Second, "3 runs before the data loss", func() bool { return runs.Load() >= 3 })
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	after := runs.Load()
	eventually.True(t, 20*time.Second, "3 runs after the ledger was lost", func() bool { return runs.Load() >= after+3 })
}
