package open

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testserver"
)

func mustOpen(t *testing.T, raw string) backend.Backend {
	t.Helper()
	b, err := Open(context.Background(), raw)
	if err != nil {
		t.Fatalf("Open(%q): %v", raw, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func sqlitePath(t *testing.T, b backend.Backend) string {
	t.Helper()
	sb, ok := b.(*sqlite.Backend)
	if !ok {
		t.Fatalf("backend is %T, want *sqlite.Backend", b)
	}
	return sb.Path()
}

func TestOpenMemory(t *testing.T) {
	for _, raw := range []string{"memory://", "memory:", "MEMORY://"} {
		b := mustOpen(t, raw)
		if got := b.Capabilities().Name; got != "memory" {
			t.Errorf("Open(%q) is %q, want memory", raw, got)
		}
	}
}

func TestOpenSQLite(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.Mkdir("sub", 0o700); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ raw, want string }{
		{"sqlite://" + filepath.Join(dir, "abs.db"), filepath.Join(dir, "abs.db")},
		{"sqlite://sub/rel.db", filepath.Join(dir, "sub", "rel.db")},
		{"sqlite://top.db", filepath.Join(dir, "top.db")},
		{"sqlite:opaque.db", filepath.Join(dir, "opaque.db")},
		{filepath.Join(dir, "bare.db"), filepath.Join(dir, "bare.db")},
		{"bare-rel.db", filepath.Join(dir, "bare-rel.db")},
		{"./a:b.db", filepath.Join(dir, "a:b.db")},
		{"sqlite://" + filepath.Join(dir, "sp%20ace.db"), filepath.Join(dir, "sp ace.db")},
		{"sqlite://" + filepath.Join(dir, "q.db") + "?busy_timeout=2s&synchronous=normal", filepath.Join(dir, "q.db")},
	}
	for _, c := range cases {
		b := mustOpen(t, c.raw)
		if got := sqlitePath(t, b); got != c.want {
			t.Errorf("Open(%q) opened %q, want %q", c.raw, got, c.want)
		}
	}
	b := mustOpen(t, "sqlite://"+filepath.Join(dir, "n.db")+"?synchronous=normal")
	if b.Capabilities().DurableFencing {
		t.Errorf("synchronous=normal: DurableFencing is true, want false")
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		raw  string
		want []string // substrings of the error
	}{
		{"", []string{"empty"}},
		{"consul://u:hunter2@db/x", []string{`"consul"`, "etcd, memory, mysql, postgres, postgresql, redis, rediss, sqlite, zk"}},
		{"redis://u:hunter2@localhost:6379/0?flavour=x", []string{"flavour"}},
		{"memory://somewhere", []string{"memory://"}},
		{"sqlite://u:hunter2@" + dir + "/x.db", []string{"no user"}},
		{"sqlite://", []string{"no database path"}},
		{"sqlite://" + dir + "/x.db?busy_timeout=soon", []string{`busy_timeout "soon"`}},
		{"sqlite://" + dir + "/x.db?synchronous=off", []string{`synchronous "off"`}},
		{"sqlite://" + dir + "/x.db?cache=shared", []string{`unknown parameter "cache"`}},
		{"redis://:hunter2@[::1", []string{"malformed"}},
	}
	for _, c := range cases {
		b, err := Open(context.Background(), c.raw)
		if err == nil {
			b.Close()
			t.Errorf("Open(%q) succeeded, want an error", c.raw)
			continue
		}
		if !errors.Is(err, backend.ErrInvalid) {
			t.Errorf("Open(%q) = %v, want an error wrapping backend.ErrInvalid", c.raw, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Open(%q) = %q, want it to contain %q", c.raw, err, w)
			}
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q) = %q: the error shows the password", c.raw, err)
		}
	}
	// A missing directory is an error from the SQLite backend naming the URL.
	missing := "sqlite://" + dir + "/nope/x.db"
	if b, err := Open(context.Background(), missing); err == nil {
		b.Close()
		t.Errorf("Open(%q) succeeded, want an error", missing)
	} else if !strings.Contains(err.Error(), "nope") {
		t.Errorf("Open(%q) = %q, want it to name the path", missing, err)
	}
}

func TestDefaultURLEnv(t *testing.T) {
	t.Setenv(EnvBackend, "memory://")
	got, err := DefaultURL()
	if err != nil || got != "memory://" {
		t.Fatalf("DefaultURL() = %q, %v; want memory://", got, err)
	}
}

func TestDefaultURLXDG(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	t.Setenv(EnvBackend, "")
	t.Setenv("XDG_STATE_HOME", state)
	got, err := DefaultURL()
	if err != nil {
		t.Fatal(err)
	}
	want := "sqlite://" + filepath.Join(state, "leasehold", "leasehold.db")
	if got != want {
		t.Fatalf("DefaultURL() = %q, want %q", got, want)
	}
	checkDir(t, filepath.Join(state, "leasehold"))
	// The URL opens, and names the file it said.
	b := mustOpen(t, got)
	if p := sqlitePath(t, b); p != filepath.Join(state, "leasehold", "leasehold.db") {
		t.Errorf("opened %q", p)
	}
}

func TestDefaultURLHome(t *testing.T) {
	home := t.TempDir()
	t.Setenv(EnvBackend, "")
	t.Setenv("HOME", home)
	for _, xdg := range []string{"", "relative/state"} {
		t.Setenv("XDG_STATE_HOME", xdg)
		got, err := DefaultURL()
		if err != nil {
			t.Fatal(err)
		}
		want := "sqlite://" + filepath.Join(home, ".local", "state", "leasehold", "leasehold.db")
		if got != want {
			t.Fatalf("XDG_STATE_HOME=%q: DefaultURL() = %q, want %q", xdg, got, want)
		}
	}
	checkDir(t, filepath.Join(home, ".local", "state", "leasehold"))
}

func checkDir(t *testing.T, dir string) {
	t.Helper()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: mode %v, want a directory with mode 0700", dir, fi.Mode())
	}
}

func TestOpenRedis(t *testing.T) {
	srv := testserver.Redis(t)
	b, err := Open(context.Background(), "redis://"+srv.Addr()+"/0?prefix=t:")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got := b.Capabilities().Name; got != "redis" {
		t.Fatalf("backend %q, want redis", got)
	}
}

// TestOpenDispatchesDatabaseURLs: postgres:// and mysql:// reach their
// backends (which fail to connect to a closed port) rather than being
// refused as unknown schemes, and no password shows in the error.
func TestOpenDispatchesDatabaseURLs(t *testing.T) {
	for _, raw := range []string{"postgres://u:hunter2@127.0.0.1:1/x?connect_timeout=2", "mysql://u:hunter2@127.0.0.1:1/x"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		b, err := Open(ctx, raw)
		cancel()
		if err == nil {
			b.Close()
			t.Fatalf("Open(%q) connected to a closed port", raw)
		}
		if strings.Contains(err.Error(), "unknown scheme") || strings.Contains(err.Error(), "hunter2") {
			t.Fatalf("Open(%q) = %v", raw, err)
		}
	}
}
