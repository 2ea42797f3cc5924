package schedule

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestRetryOnServerBackends: a retry waits for the failed attempt's lease
// to lapse by the backend's own clock — an etcd lease (whose TTL is fixed
// when it is granted: a heartbeat cannot shorten it), a Redis PX, a
// PostgreSQL expiry — and is then a reclaim with a greater token and
// attempt 2, after the backoff.
func TestRetryOnServerBackends(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	open := map[string]func(t *testing.T) backend.Backend{
		"etcd": func(t *testing.T) backend.Backend {
			srv := testserver.Etcd(t)
			b, err := etcd.OpenConfig(ctx, etcd.Config{Endpoints: []string{srv.Addr()}, Prefix: "retry/"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
		"redis": func(t *testing.T) backend.Backend {
			srv := testserver.Redis(t)
			b, err := redis.Open(ctx, "redis://"+srv.Addr()+"/0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
		"postgres": func(t *testing.T) backend.Backend {
			url := testserver.PostgresURL(t)
			prefix := "rt" + backend.NewNonce().String()[:8] + "_"
			b, err := postgres.Open(ctx, url, postgres.WithTablePrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				b.Close()
				if c, err := pgx.Connect(context.Background(), url); err == nil {
					_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS leasehold."+prefix+"jobs, leasehold."+prefix+"leases, leasehold."+prefix+"meta, leasehold."+prefix+"runs CASCADE")
					c.Close(context.Background())
				}
			})
			return b
		},
	}
	for name, o := range open {
		t.Run(name, func(t *testing.T) {
			b := o(t)
			p := RetryPolicy{Max: 1, Backoff: 2500 * time.Millisecond, MaxBackoff: 2500 * time.Millisecond}
			var l attemptLog
			s := startJob(t, b, "a", Job{Name: "flaky", Schedule: "0 0 1 1 *", LeaseTTL: time.Second, Retry: p, Func: l.job(1)})
			at := backend.Instant(time.Now())
			s.occur(s.loopCtx, s.jobs["flaky"], at)
			r := waitRun(t, b, "flaky", at, time.Minute, "the occurrence finished", func(r backend.Run) bool { return r.State.Finished() })
			seen := checkAttempts(t, &l, 2, p)
			if r.State != backend.Succeeded || r.Attempt != 2 || r.Token != seen[1].token {
				t.Fatalf("ledger: %s attempt %d token %d (error %q), want succeeded attempt 2 token %d", r.State, r.Attempt, r.Token, r.Error, seen[1].token)
			}
		})
	}
}
