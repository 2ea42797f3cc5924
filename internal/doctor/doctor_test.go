package doctor_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/open"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/chaos/harness"
	"github.com/leasehold/leasehold/internal/doctor"
	"github.com/leasehold/leasehold/internal/testserver"
)

func line(t *testing.T, r doctor.Report, capability string) doctor.Line {
	t.Helper()
	for _, l := range r.Lines {
		if l.Capability == capability {
			return l
		}
	}
	t.Fatalf("no line for %s in %+v", capability, r.Lines)
	return doctor.Line{}
}

// TestCheckSQLite: a line per capability with the backend's own reason
// where its configuration decides it; the host's clock is the backend's.
func TestCheckSQLite(t *testing.T) {
	ctx := context.Background()
	for _, full := range []bool{true, false} {
		b, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "d.db"), sqlite.WithSynchronousFull(full))
		if err != nil {
			t.Fatal(err)
		}
		r, err := doctor.Check(ctx, b, 3)
		b.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Lines) != 8 || r.Rounds != 3 || !r.ClockKnown {
			t.Fatalf("report %+v: want 8 lines, 3 rounds and a clock", r)
		}
		d := line(t, r, "DurableFencing")
		if d.Warn == full || !strings.Contains(d.Why, "synchronous=") {
			t.Errorf("synchronous full=%v: DurableFencing line %+v", full, d)
		}
		if got := len(r.Warnings()); (got == 0) != full {
			t.Errorf("synchronous full=%v: warnings %q", full, r.Warnings())
		}
	}
}

// TestWarningsLeasesOnly: a backend without a ledger is warned about, and
// so is one that serves one process.
func TestWarningsLeasesOnly(t *testing.T) {
	m := memory.New()
	defer m.Close()
	ws := strings.Join(doctor.Warnings(context.Background(), struct{ backend.Leases }{m}), "\n")
	for _, want := range []string{"Ledger no: it implements backend.Leases only", "MultiProcess no", "DurableFencing no"} {
		if !strings.Contains(ws, want) {
			t.Errorf("warnings lack %q:\n%s", want, ws)
		}
	}
}

// TestCheckUnreachable: a backend that stops answering is ErrUnreachable.
func TestCheckUnreachable(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := context.Background()
	b, err := redis.Open(ctx, "redis://"+srv.Addr()+"/0?max_retries=-1")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := doctor.Check(ctx, b, 1); err != nil {
		t.Fatalf("Check while the server runs: %v", err)
	}
	srv.Kill()
	if _, err := doctor.Check(ctx, b, 1); !errors.Is(err, doctor.ErrUnreachable) {
		t.Fatalf("Check after the server died = %v, want ErrUnreachable", err)
	}
}

// TestCheckDatabases: PostgreSQL and MariaDB explain durability by the
// setting that decides it and report their clocks; the offset from this
// host (same machine) is far below an hour, which a time-zone mistake in
// reading the server's clock would not be.
func TestCheckDatabases(t *testing.T) {
	for name, setting := range map[string]string{"postgres": "synchronous_commit", "mysql": "innodb_flush_log_at_trx_commit"} {
		t.Run(name, func(t *testing.T) {
			raw, err := harness.StartURL(t, name, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			b, err := open.Open(ctx, raw)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			r, err := doctor.Check(ctx, b, 3)
			if err != nil {
				t.Fatal(err)
			}
			if d := line(t, r, "DurableFencing"); !strings.Contains(d.Why, setting) {
				t.Errorf("DurableFencing line %+v does not name %s", d, setting)
			}
			if r.ExplainErr != nil {
				t.Errorf("Explain: %v", r.ExplainErr)
			}
			t.Logf("%s: round trip %v, clock offset %v ±%v", name, r.RTT, r.Offset, r.OffsetBound)
			if !r.ClockKnown || r.Offset > time.Hour || r.Offset < -time.Hour {
				t.Errorf("clock known %v, offset %v: want the server's clock, read in UTC", r.ClockKnown, r.Offset)
			}
		})
	}
}
