package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// attemptLog is what a job itself wrote about its attempts: the ledger is
// compared with it, never with itself.
type attemptLog struct {
	mu      sync.Mutex
	running int
	overlap int
	seen    []attemptSeen
}

type attemptSeen struct {
	attempt    int
	token      uint64
	instance   string
	start, end time.Time
}

// job returns a Func that fails its first fails attempts (all if fails <
// 0) and records each attempt.
func (l *attemptLog) job(fails int) Func {
	return func(ctx context.Context, r Run) error {
		l.mu.Lock()
		l.running++
		if l.running > 1 {
			l.overlap++
		}
		i := len(l.seen)
		l.seen = append(l.seen, attemptSeen{attempt: r.Attempt, token: uint64(r.Token), instance: r.Instance, start: time.Now()})
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			l.running--
			l.seen[i].end = time.Now()
			l.mu.Unlock()
		}()
		if fails < 0 || i < fails {
			return fmt.Errorf("attempt %d: %w", r.Attempt, errFlaky)
		}
		return nil
	}
}

func (l *attemptLog) snapshot() ([]attemptSeen, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]attemptSeen(nil), l.seen...), l.overlap
}

var errFlaky = errors.New("flaky dependency")

// checkAttempts asserts attempts 1..n ran in order, one at a time, each
// with a greater token than the one before and after the previous one's
// backoff (Backoff doubling per failure).
func checkAttempts(t *testing.T, l *attemptLog, n int, p RetryPolicy) []attemptSeen {
	t.Helper()
	seen, overlap := l.snapshot()
	if len(seen) != n || overlap > 0 {
		t.Fatalf("%d attempts ran (%d beside another): %+v, want %d one at a time", len(seen), overlap, seen, n)
	}
	wait := p.Backoff
	for i, a := range seen {
		if a.attempt != i+1 {
			t.Fatalf("attempt %d ran as Attempt %d: %+v", i+1, a.attempt, seen)
		}
		if i == 0 {
			continue
		}
		if a.token <= seen[i-1].token {
			t.Fatalf("attempt %d has token %d, not greater than attempt %d's %d", i+1, a.token, i, seen[i-1].token)
		}
		if gap := a.start.Sub(seen[i-1].end); gap < wait {
			t.Fatalf("attempt %d started %v after attempt %d failed, before its backoff of %v", i+1, gap, i, wait)
		}
		wait = min(2*wait, p.MaxBackoff)
	}
	return seen
}

func retryBackends(t *testing.T) map[string]func(t *testing.T) backend.Backend {
	return map[string]func(t *testing.T) backend.Backend{
		"memory": func(t *testing.T) backend.Backend {
			m := memory.New()
			t.Cleanup(func() { m.Close() })
			return m
		},
		"sqlite": openSQLite,
	}
}

// TestRetryFailedRunUntilSuccess (issue 15 item 9): a job that fails
// twice and then succeeds, with Retry.Max 3, runs 3 attempts, each with a
// greater fencing token and after its backoff, and the ledger records the
// last attempt as succeeded.
func TestRetryFailedRunUntilSuccess(t *testing.T) {
	for name, open := range retryBackends(t) {
		t.Run(name, func(t *testing.T) {
			b := open(t)
			p := RetryPolicy{Max: 3, Backoff: 400 * time.Millisecond, MaxBackoff: 700 * time.Millisecond}
			var l attemptLog
			s := startJob(t, b, "a", Job{Name: "flaky", Schedule: "0 0 1 1 *", LeaseTTL: 300 * time.Millisecond, Retry: p, Func: l.job(2)})
			at := backend.Instant(time.Now())
			s.occur(s.loopCtx, s.jobs["flaky"], at)
			r := waitRun(t, b, "flaky", at, 20*time.Second, "the occurrence finished", func(r backend.Run) bool { return r.State.Finished() })
			seen := checkAttempts(t, &l, 3, p)
			if r.State != backend.Succeeded || r.Attempt != 3 || r.Token != seen[2].token {
				t.Fatalf("ledger: %s attempt %d token %d (error %q), want succeeded attempt 3 token %d", r.State, r.Attempt, r.Token, r.Error, seen[2].token)
			}
		})
	}
}

// TestRetryStopsAtMax: a job that always fails, with Retry.Max 2, runs
// 1+2 attempts and the ledger records the last one as failed, with its
// error.
func TestRetryStopsAtMax(t *testing.T) {
	for name, open := range retryBackends(t) {
		t.Run(name, func(t *testing.T) {
			b := open(t)
			p := RetryPolicy{Max: 2, Backoff: 100 * time.Millisecond, MaxBackoff: 150 * time.Millisecond}
			var l attemptLog
			s := startJob(t, b, "a", Job{Name: "broken", Schedule: "0 0 1 1 *", LeaseTTL: 300 * time.Millisecond, Retry: p, Func: l.job(-1)})
			at := backend.Instant(time.Now())
			s.occur(s.loopCtx, s.jobs["broken"], at)
			r := waitRun(t, b, "broken", at, 20*time.Second, "the occurrence finished", func(r backend.Run) bool { return r.State.Finished() })
			seen := checkAttempts(t, &l, 3, p) // a finished occurrence is never reclaimed: no 4th can follow
			if r.State != backend.Failed || r.Attempt != 3 || r.Token != seen[2].token || r.Error != "attempt 3: "+errFlaky.Error() {
				t.Fatalf("ledger: %s attempt %d token %d error %q, want failed attempt 3 token %d error %q",
					r.State, r.Attempt, r.Token, r.Error, seen[2].token, "attempt 3: "+errFlaky.Error())
			}
		})
	}
}

// TestRetryRunByAnotherInstance: the retry of a failed attempt is a
// reclaim like any other: when the instance whose attempt failed stops
// during the backoff, another instance runs the retry, with a greater
// token and attempt 2.
func TestRetryRunByAnotherInstance(t *testing.T) {
	for name, open := range retryBackends(t) {
		t.Run(name, func(t *testing.T) {
			b := open(t)
			p := RetryPolicy{Max: 3, Backoff: time.Minute, MaxBackoff: time.Minute}
			var l attemptLog
			job := Job{Name: "handover", Schedule: "0 0 1 1 *", LeaseTTL: 300 * time.Millisecond, Retry: p, Func: l.job(1)}
			a := startJob(t, b, "a", job)
			startJob(t, b, "b", job)
			at := backend.Instant(time.Now())
			done := make(chan struct{})
			go func() { defer close(done); a.occur(a.loopCtx, a.jobs["handover"], at) }()
			// Wait for occur itself to return (it hands the failed attempt
			// to a hold goroutine the scheduler tracks), not only for the
			// job: a Shutdown while occur still runs races its s.runs.Add.
			eventually.True(t, 10*time.Second, "attempt 1 returned and a's occur handed it to the retry hold", func() bool {
				select {
				case <-done:
				default:
					return false
				}
				seen, _ := l.snapshot()
				return len(seen) == 1 && !seen[0].end.IsZero()
			})
			// a holds the failed attempt's lease through the minute of
			// backoff; stopping ends the hold, the lease lapses and b's
			// sweep retries it.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := a.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			<-done
			r := waitRun(t, b, "handover", at, 20*time.Second, "the occurrence finished", func(r backend.Run) bool { return r.State.Finished() })
			seen, overlap := l.snapshot()
			if len(seen) != 2 || overlap > 0 || seen[1].instance != "b" || seen[1].attempt != 2 || seen[1].token <= seen[0].token {
				t.Fatalf("attempts %+v (%d overlapping), want attempt 1 on a then attempt 2 on b with a greater token", seen, overlap)
			}
			if r.State != backend.Succeeded || r.Attempt != 2 || r.Owner.Instance != "b" || r.Token != seen[1].token {
				t.Fatalf("ledger: %s attempt %d by %s token %d, want succeeded attempt 2 by b token %d", r.State, r.Attempt, r.Owner.Instance, r.Token, seen[1].token)
			}
		})
	}
}

// TestRetryPolicyValidation: a bad retry policy is refused with an error
// that wraps leasehold.ErrInvalid and names the field and the value; the
// defaults fill what is left out.
func TestRetryPolicyValidation(t *testing.T) {
	base := Job{Name: "j", Schedule: "@every 1m", Func: func(context.Context, Run) error { return nil }}
	for _, c := range []struct {
		name string
		edit func(*Job)
		want string
	}{
		{"negative max", func(j *Job) { j.Retry.Max = -1 }, "retry max -1 is not in 0..100"},
		{"max too large", func(j *Job) { j.Retry.Max = 101 }, "retry max 101 is not in 0..100"},
		{"negative backoff", func(j *Job) { j.Retry = RetryPolicy{Max: 1, Backoff: -time.Second} }, "retry backoff -1s is negative"},
		{"negative max backoff", func(j *Job) { j.Retry = RetryPolicy{Max: 1, MaxBackoff: -time.Second} }, "retry max backoff -1s is negative"},
		{"max backoff below backoff", func(j *Job) { j.Retry = RetryPolicy{Max: 1, Backoff: time.Minute, MaxBackoff: time.Second} }, "retry max backoff 1s is less than the backoff 1m0s"},
		{"max backoff too long", func(j *Job) { j.Retry = RetryPolicy{Max: 1, MaxBackoff: 25 * time.Hour} }, "retry max backoff 25h0m0s is more than 24h0m0s"},
		{"attempts cut retries short", func(j *Job) { j.Retry.Max = 5; j.MaxAttempts = 3 }, "max attempts 3 is less than 1 + retry max 5"},
		{"crash skip", func(j *Job) { j.Retry.Max = 1; j.Crash = CrashSkip }, `retry max 1 needs crash "retry"`},
		{"every instance", func(j *Job) { j.Retry.Max = 1; j.Mode = EveryInstance }, `retry max 1 needs claims`},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := base
			c.edit(&j)
			err := Validate(j, 0)
			if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `job "j"`) {
				t.Fatalf("Validate: %v, want ErrInvalid naming job \"j\" and %q", err, c.want)
			}
		})
	}
	j := base
	j.Retry.Max = 4
	got, _, err := j.withDefaults(0)
	if err != nil {
		t.Fatal(err)
	}
	want := RetryPolicy{Max: 4, Backoff: 10 * time.Second, MaxBackoff: 10 * time.Minute}
	if got.Retry != want || got.MaxAttempts != 5 {
		t.Fatalf("defaults: %+v, max attempts %d; want %+v, max attempts 5", got.Retry, got.MaxAttempts, want)
	}
	if d := (RetryPolicy{Max: 9, Backoff: time.Second, MaxBackoff: 5 * time.Second}); d.wait(1) != time.Second || d.wait(2) != 2*time.Second || d.wait(3) != 4*time.Second || d.wait(4) != 5*time.Second || d.wait(60) != 5*time.Second {
		t.Fatalf("backoff does not double from 1s up to 5s: %v %v %v %v %v", d.wait(1), d.wait(2), d.wait(3), d.wait(4), d.wait(60))
	}
}

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
