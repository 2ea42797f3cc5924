package schedule

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// openSQLite opens a SQLite ledger in the test's temp dir, closed after
// the schedulers the test starts (t.Cleanup runs last-in first-out).
func openSQLite(t *testing.T) backend.Backend {
	t.Helper()
	b, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// waitRun polls the ledger until the occurrence's record satisfies done,
// and returns it; the test fails after within.
func waitRun(t *testing.T, l backend.Ledger, job string, at time.Time, within time.Duration, what string, done func(backend.Run) bool) backend.Run {
	t.Helper()
	var r backend.Run
	var err error
	if !eventually.Within(within, func() bool {
		r, err = l.GetRun(context.Background(), job, at)
		return err == nil && done(r)
	}) {
		t.Fatalf("%s: not true within %v: last record %+v, %v", what, within, r, err)
	}
	return r
}

// TestTimeoutRecordedAsFailedTimeout (issue 15 item 2): a run stopped by
// its Timeout is recorded as failed with an error that says it timed out —
// also when the job returns its context's ctx.Err() ("context canceled"),
// which said nothing of a timeout — and never as a crash (abandoned or
// reclaimed). A job that returns nil after its timeout did its work: it is
// recorded as succeeded (retrying it would repeat the effect).
func TestTimeoutRecordedAsFailedTimeout(t *testing.T) {
	for _, c := range []struct {
		name      string
		ret       func(ctx context.Context) error
		wantState backend.RunState
	}{
		{"returns ctx.Err()", func(ctx context.Context) error { return ctx.Err() }, backend.Failed},
		{"returns the cause", func(ctx context.Context) error { return context.Cause(ctx) }, backend.Failed},
		{"returns its own error", func(ctx context.Context) error { return errCustom }, backend.Failed},
		{"returns nil", func(ctx context.Context) error { return nil }, backend.Succeeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := openSQLite(t)
			s := startJob(t, b, "a", Job{Name: "t", Schedule: "0 0 1 1 *", LeaseTTL: 2 * time.Second, Timeout: 50 * time.Millisecond,
				Crash: CrashSkip, Func: func(ctx context.Context, r Run) error { <-ctx.Done(); return c.ret(ctx) }})
			at := backend.Instant(time.Now())
			s.occur(s.loopCtx, s.jobs["t"], at)
			r := waitRun(t, b, "t", at, 10*time.Second, "the run finished", func(r backend.Run) bool { return r.State.Finished() })
			if r.State != c.wantState || r.Attempt != 1 {
				t.Fatalf("ledger: %s attempt %d (error %q), want %s attempt 1", r.State, r.Attempt, r.Error, c.wantState)
			}
			if c.wantState == backend.Failed && !strings.Contains(r.Error, "timed out after 50ms") {
				t.Fatalf("recorded error %q does not say the run timed out after its 50ms timeout", r.Error)
			}
			if c.name == "returns its own error" && !strings.Contains(r.Error, errCustom.Error()) {
				t.Fatalf("recorded error %q lost the job's own error %q", r.Error, errCustom)
			}
		})
	}
}

var errCustom = customError("flush interrupted")

type customError string

func (e customError) Error() string { return string(e) }
