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
	"github.com/leasehold/leasehold/backend/mysql"
	"github.com/leasehold/leasehold/backend/open"
	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/chaos/harness"
	"github.com/leasehold/leasehold/internal/doctor"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
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
		if len(r.Lines) != 9 || r.Rounds != 3 || !r.ClockKnown {
			t.Fatalf("report %+v: want 9 lines, 3 rounds and a clock", r)
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

// TestSQLiteIsLocal: the report says a SQLite ledger is local to this
// host — MultiProcess yes alone read as if daemons on several hosts shared
// it — and a server backend's is shared; neither is a warning.
func TestSQLiteIsLocal(t *testing.T) {
	ctx := context.Background()
	b, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "d.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r, err := doctor.Check(ctx, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	h := line(t, r, "HostsShared")
	if h.Value != "no" || h.Warn || !strings.Contains(h.Why, "local to this host") {
		t.Errorf("HostsShared line %+v: want no, local to this host", h)
	}
	if m := line(t, r, "MultiProcess"); !strings.Contains(m.Why, "on this host") {
		t.Errorf("MultiProcess line %+v does not say the processes are this host's", m)
	}
	var out strings.Builder
	if err := r.WriteText(&out, "sqlite://d.db"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "HostsShared     no") {
		t.Errorf("report text lacks HostsShared no:\n%s", out.String())
	}
	if !doctor.HostLocal(backend.Capabilities{Name: "memory"}) || doctor.HostLocal(backend.Capabilities{Name: "redis"}) {
		t.Error("HostLocal: memory must be local, redis not")
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

// TestCheckRereadsLiveConfig: the declaration doctor prints rests on the
// server's configuration as it is now, not as New read it. A server that
// had appendonly yes + appendfsync always when the backend was opened and
// then got CONFIG SET appendonly no forgets every grant since at a crash:
// DurableFencing must read "no" (and be warned about), with the reason.
func TestCheckRereadsLiveConfig(t *testing.T) {
	srv := testserver.Redis(t, "--appendonly", "yes", "--appendfsync", "always")
	ctx := context.Background()
	b, err := redis.Open(ctx, "redis://"+srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r, err := doctor.Check(ctx, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d := line(t, r, "DurableFencing"); d.Value != "yes" || d.Warn {
		t.Fatalf("appendonly yes, appendfsync always: DurableFencing line %+v, want yes", d)
	}
	if err := b.Client().ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		t.Fatal(err)
	}
	r, err = doctor.Check(ctx, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d := line(t, r, "DurableFencing"); d.Value != "no" || !d.Warn || !strings.Contains(d.Why, "appendonly no") {
		t.Errorf("after CONFIG SET appendonly no: DurableFencing line %+v, want no, warned, because of appendonly no", d)
	}
	if ws := strings.Join(doctor.Warnings(ctx, b), "\n"); !strings.Contains(ws, "DurableFencing no") {
		t.Errorf("after CONFIG SET appendonly no: the start-up warnings lack DurableFencing no:\n%s", ws)
	}
	var out strings.Builder
	if err := r.WriteText(&out, "redis://"+srv.Addr()); err != nil {
		t.Fatal(err)
	}
	if r.ReadAt.IsZero() || !strings.Contains(out.String(), "read at:") {
		t.Errorf("the report does not say when the configuration was read (ReadAt %v):\n%s", r.ReadAt, out.String())
	}
	// A configuration that cannot be read again is no guarantee: the
	// warnings say so, and withdraw what rests on it.
	if err := b.Client().ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	if ws := strings.Join(doctor.Warnings(ctx, b), "\n"); strings.Contains(ws, "DurableFencing no") {
		t.Fatalf("appendonly yes again: warnings still say DurableFencing no:\n%s", ws)
	}
	srv.Kill()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ws := strings.Join(doctor.Warnings(wctx, b), "\n")
	for _, want := range []string{"configuration: could not be read again", "DurableFencing no", "SafeFencing no"} {
		if !strings.Contains(ws, want) {
			t.Errorf("the server gone: warnings lack %q:\n%s", want, ws)
		}
	}
}

// TestChanges: a capability whose value differs between two declarations
// is named with both values and the new reason; one that stayed is not.
func TestChanges(t *testing.T) {
	was := doctor.Declaration{Lines: []doctor.Line{
		{Capability: "SafeFencing", Value: "yes", Why: "noeviction"},
		{Capability: "DurableFencing", Value: "yes", Why: "appendonly yes"},
	}}
	now := doctor.Declaration{Lines: []doctor.Line{
		{Capability: "SafeFencing", Value: "yes", Why: "noeviction"},
		{Capability: "DurableFencing", Value: "no", Warn: true, Why: "appendonly no"},
	}}
	got := doctor.Changes(was, now)
	if len(got) != 1 || got[0].String() != "DurableFencing no, was yes: appendonly no" || !got[0].Warn {
		t.Errorf("Changes = %+v, want the one change of DurableFencing, warned", got)
	}
	if back := doctor.Changes(now, was); len(back) != 1 || back[0].Warn || back[0].Was != "no" {
		t.Errorf("Changes back = %+v, want DurableFencing yes again, not warned", back)
	}
	if got := doctor.Changes(now, now); len(got) != 0 {
		t.Errorf("Changes of a declaration to itself = %+v", got)
	}
}

// TestCheckDatabasesRereadConfig: PostgreSQL and MariaDB read the setting
// that decides durability when they are opened; a server reconfigured
// since (synchronous_commit off, innodb_flush_log_at_trx_commit 2) loses
// the last grants at a crash, and doctor must say DurableFencing no.
func TestCheckDatabasesRereadConfig(t *testing.T) {
	for name, tc := range map[string]struct {
		setting string
		loosen  func(context.Context, backend.Leases) error
	}{
		"postgres": {"synchronous_commit off", func(ctx context.Context, b backend.Leases) error {
			pool := b.(*postgres.Backend).Pool()
			if _, err := pool.Exec(ctx, "ALTER SYSTEM SET synchronous_commit = off"); err != nil {
				return err
			}
			_, err := pool.Exec(ctx, "SELECT pg_reload_conf()")
			return err
		}},
		"mysql": {"innodb_flush_log_at_trx_commit 2", func(ctx context.Context, b backend.Leases) error {
			_, err := b.(*mysql.Backend).DB().ExecContext(ctx, "SET GLOBAL innodb_flush_log_at_trx_commit = 2")
			return err
		}},
	} {
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
			if !b.Capabilities().DurableFencing {
				t.Fatalf("a fresh server: %+v, want DurableFencing", b.Capabilities())
			}
			if err := tc.loosen(ctx, b); err != nil {
				t.Fatal(err)
			}
			// PostgreSQL's sessions take a reloaded setting at their next
			// command, not at once.
			var d doctor.Line
			ok := eventually.Within(20*time.Second, func() bool {
				r, err := doctor.Check(ctx, b, 1)
				if err != nil {
					t.Fatal(err)
				}
				d = line(t, r, "DurableFencing")
				return d.Value == "no"
			})
			if !ok || !d.Warn || !strings.Contains(d.Why, tc.setting) {
				t.Errorf("after setting %s: DurableFencing line %+v, want no, warned, because of %s", tc.setting, d, tc.setting)
			}
		})
	}
}

// TestCheckEtcdSaysTenantsAreNotIsolated (issue 27 item 3): etcd's RBAC
// does not cover leases, so a tenant confined to its key prefix can still
// keep another tenant's leases alive; "leasehold doctor" says so on an
// etcd backend (and only there).
func TestCheckEtcdSaysTenantsAreNotIsolated(t *testing.T) {
	srv := testserver.Etcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := open.Open(ctx, "etcd://"+srv.Addr()+"/lh-doctor")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r, err := doctor.Check(ctx, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	l := line(t, r, "TenantIsolation")
	if l.Value != "no" || !strings.Contains(l.Why, "LeaseKeepAlive") || !strings.Contains(l.Why, "namespaces.md") {
		t.Errorf("etcd TenantIsolation line: %+v; want no, naming LeaseKeepAlive and docs/namespaces.md", l)
	}
	m := memory.New()
	defer m.Close()
	rm, err := doctor.Check(ctx, m, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range rm.Lines {
		if l.Capability == "TenantIsolation" {
			t.Errorf("memory backend has a TenantIsolation line: %+v", l)
		}
	}
}
