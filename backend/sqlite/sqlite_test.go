//go:build linux

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// fakeClock is a controllable CLOCK_BOOTTIME and wall clock for one Backend.
type fakeClock struct {
	mu   sync.Mutex
	mono int64
	wall time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{mono: int64(1000 * time.Hour), wall: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) option() Option {
	return withClocks(func() (int64, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.mono, nil
	}, func() time.Time {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.wall
	})
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mono += int64(d)
	c.wall = c.wall.Add(d)
}

func dbPath(t testing.TB) string { return filepath.Join(t.TempDir(), "leasehold.db") }

func open(t testing.TB, path string, opts ...Option) *Backend {
	t.Helper()
	b, err := Open(context.Background(), path, opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func own(name string) backend.Owner {
	return backend.Owner{Instance: name, Nonce: backend.NewNonce()}
}

func must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func mustIs(t testing.TB, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got %v, want %v", what, err, target)
	}
}

func TestOpenRejectsBadPathsAndOptions(t *testing.T) {
	ctx := context.Background()
	for _, p := range []string{"", ":memory:", "file::memory:?cache=shared", "file:x.db"} {
		_, err := Open(ctx, p)
		mustIs(t, err, backend.ErrInvalid, "Open("+p+")")
	}
	_, err := Open(ctx, filepath.Join(t.TempDir(), "missing", "dir", "x.db"))
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("Open in a missing directory: got %v, want an error naming the path", err)
	}
	for _, d := range []time.Duration{0, -time.Second, 11 * time.Minute} {
		_, err := Open(ctx, dbPath(t), WithBusyTimeout(d))
		mustIs(t, err, backend.ErrInvalid, "WithBusyTimeout("+d.String()+")")
	}
	_, err = Open(ctx, dbPath(t), nil)
	mustIs(t, err, backend.ErrInvalid, "nil option")
}

func TestOpenPathWithURICharacters(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a dir?#%", "x?y#z%20.db")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	b := open(t, p)
	_, err := b.Acquire(context.Background(), "k", own("a"), time.Minute)
	must(t, err, "Acquire")
	if _, err := os.Stat(p); err != nil { // stat, not open: opening would drop SQLite's locks
		t.Fatalf("database not created at %q", p)
	}
}

func TestNetworkFSClassifier(t *testing.T) {
	network := map[uint32]string{
		0x6969: "NFS", 0x517B: "SMB", 0xFF534D42: "CIFS", 0xFE534D42: "SMB2", 0x00C36400: "Ceph",
		0x01021997: "9p", 0x5346414F: "AFS", 0x0BD00BD0: "Lustre", 0x01161970: "GFS2", 0x7461636f: "OCFS2",
	}
	for magic, want := range network {
		name, bad := networkFS(magic)
		if !bad || name != want {
			t.Errorf("networkFS(%#x) = %q, %v; want %q, true", magic, name, bad, want)
		}
	}
	// Statfs_t.Type is signed on some architectures: CIFS arrives negative.
	var signed int32 = -0x00ACB2BE // 0xFF534D42 as int32
	if name, bad := networkFS(uint32(signed)); !bad || name != "CIFS" {
		t.Errorf("networkFS(int32 CIFS) = %q, %v", name, bad)
	}
	local := []uint32{0xEF53 /* ext2/3/4 */, 0x01021994 /* tmpfs */, 0x58465342 /* xfs */, 0x9123683E /* btrfs */, 0x794c7630 /* overlayfs */, 0x2FC12FC1 /* zfs */}
	for _, magic := range local {
		if name, bad := networkFS(magic); bad {
			t.Errorf("networkFS(%#x) = %q, true; want a local filesystem", magic, name)
		}
	}
	// The temp dir of this test is local.
	must(t, checkLocalFS(dbPath(t)), "checkLocalFS(temp dir)")
}

func TestDurableFencingReadsBackSynchronous(t *testing.T) {
	for _, full := range []bool{true, false} {
		b := open(t, dbPath(t), WithSynchronousFull(full))
		var level int
		var mode string
		must(t, b.db.QueryRow("PRAGMA synchronous").Scan(&level), "PRAGMA synchronous")
		must(t, b.db.QueryRow("PRAGMA journal_mode").Scan(&mode), "PRAGMA journal_mode")
		want := 1
		if full {
			want = 2
		}
		if level != want || mode != "wal" {
			t.Errorf("full=%v: synchronous=%d journal_mode=%q, want %d wal", full, level, mode, want)
		}
		c := b.Capabilities()
		if c.DurableFencing != full {
			t.Errorf("full=%v: DurableFencing=%v", full, c.DurableFencing)
		}
		want2 := backend.Capabilities{Name: "sqlite", ServerClock: true, SafeFencing: true, DurableFencing: full, MultiProcess: true, MinTTL: time.Millisecond}
		if c != want2 {
			t.Errorf("Capabilities() = %+v, want %+v", c, want2)
		}
	}
}

func TestSchemaVersionNewerIsRefused(t *testing.T) {
	p := dbPath(t)
	b, err := Open(context.Background(), p)
	must(t, err, "Open")
	must(t, b.Close(), "Close")
	raw, err := sql.Open("sqlite", p)
	must(t, err, "sql.Open")
	_, err = raw.Exec(`UPDATE meta SET value = 99 WHERE name = 'schema_version'`)
	must(t, err, "bump schema_version")
	must(t, raw.Close(), "raw Close")
	_, err = Open(context.Background(), p)
	mustIs(t, err, ErrSchemaTooNew, "Open of a newer schema")
	if !strings.Contains(err.Error(), "99") || !strings.Contains(err.Error(), p) {
		t.Errorf("error %q does not name the version and the path", err)
	}
}

func TestReopenKeepsSchema(t *testing.T) {
	p := dbPath(t)
	for range 3 {
		b, err := Open(context.Background(), p)
		must(t, err, "Open")
		must(t, b.Close(), "Close")
	}
}

func TestClosed(t *testing.T) {
	b := open(t, dbPath(t))
	must(t, b.Close(), "Close")
	must(t, b.Close(), "second Close")
	ctx := context.Background()
	_, err := b.Acquire(ctx, "k", own("a"), time.Second)
	mustIs(t, err, backend.ErrClosed, "Acquire after Close")
	_, err = b.Get(ctx, "k")
	mustIs(t, err, backend.ErrClosed, "Get after Close")
	_, err = b.List(ctx, "", 0)
	mustIs(t, err, backend.ErrClosed, "List after Close")
	_, err = b.Claim(ctx, backend.ClaimRequest{Job: "j", ScheduledAt: time.Now(), Owner: own("a"), TTL: time.Second})
	mustIs(t, err, backend.ErrClosed, "Claim after Close")
	_, err = b.ListRuns(ctx, backend.RunFilter{})
	mustIs(t, err, backend.ErrClosed, "ListRuns after Close")
}

func TestCancelledContext(t *testing.T) {
	b := open(t, dbPath(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.Acquire(ctx, "k", own("a"), time.Second)
	mustIs(t, err, context.Canceled, "Acquire with a cancelled context")
	ls, err := b.List(context.Background(), "", 0)
	must(t, err, "List")
	if len(ls) != 0 {
		t.Fatalf("cancelled Acquire left %d leases", len(ls))
	}
}
