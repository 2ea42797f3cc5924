package daemon

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/doctor"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestRunLogsGuaranteeWarnings: at start the daemon logs every warning
// "leasehold doctor" gives for its backend (the memory backend: no durable
// fencing, one process only), before it is ready.
func TestRunLogsGuaranteeWarnings(t *testing.T) {
	cfg, err := Parse("/tmp/l.yaml", []byte(oneJob+"http: {listen: \"off\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := memory.New()
	defer b.Close()
	logs := &testkit.Buffer{}
	d, err := New(cfg, b, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("daemon stopped: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("daemon not ready in 20s")
	}
	want := doctor.Warnings(context.Background(), b)
	if len(want) == 0 {
		t.Fatal("doctor gives no warnings for the memory backend")
	}
	got := logs.String()
	for _, w := range want {
		if !strings.Contains(got, "backend guarantee not given") || !strings.Contains(got, w) {
			t.Errorf("the start log lacks the warning %q:\n%s", w, got)
		}
	}
	if !strings.Contains(got, "MultiProcess no") {
		t.Errorf("the start log does not say the memory backend serves one process:\n%s", got)
	}
}

// TestRunLogsSQLiteIsLocal: a daemon on SQLite says at start that its
// ledger is local to this host (three hosts each on their own file would
// run every job three times).
func TestRunLogsSQLiteIsLocal(t *testing.T) {
	cfg, err := Parse("/tmp/l.yaml", []byte(oneJob+"http: {listen: \"off\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "d.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	logs := &testkit.Buffer{}
	d, err := New(cfg, b, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("daemon stopped: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("daemon not ready in 20s")
	}
	if got := logs.String(); !strings.Contains(got, "level=WARN msg=\"backend local to this host\"") || !strings.Contains(got, "daemons on other hosts do not share it") {
		t.Errorf("the start log does not say the SQLite ledger is local to this host:\n%s", got)
	}
}

// TestRunLogsGuaranteeChanges: a running daemon reads its backend's
// declaration again (every recheckEvery) and logs a warning when a
// durability guarantee is withdrawn: the Redis server it started on had
// appendonly yes + appendfsync always, then got CONFIG SET appendonly no.
// When it is given again, that is logged too, at INFO.
func TestRunLogsGuaranteeChanges(t *testing.T) {
	srv := testserver.Redis(t, "--appendonly", "yes", "--appendfsync", "always")
	cfg, err := Parse("/tmp/l.yaml", []byte(oneJob+"http: {listen: \"off\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b, err := redis.Open(ctx, "redis://"+srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	logs := &testkit.Buffer{}
	d, err := New(cfg, b, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	d.recheckEvery = 50 * time.Millisecond
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("daemon stopped: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("daemon not ready in 20s")
	}
	if got := logs.String(); strings.Contains(got, "DurableFencing no") {
		t.Fatalf("appendonly yes, appendfsync always: the start log warns of DurableFencing:\n%s", got)
	}
	if err := b.Client().ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "a warning that DurableFencing changed to no", func() bool {
		got := logs.String()
		return strings.Contains(got, "level=WARN") && strings.Contains(got, "backend guarantee changed") &&
			strings.Contains(got, "DurableFencing no, was yes: appendonly no")
	})
	// Given again, it is news, not a warning.
	if err := b.Client().ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "a note that DurableFencing changed back to yes", func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "DurableFencing yes, was no") {
				return strings.Contains(l, "level=INFO")
			}
		}
		return false
	})
}
