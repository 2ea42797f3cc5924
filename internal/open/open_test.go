package open

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

func mustOpen(t *testing.T, raw string) backend.Leases {
	t.Helper()
	b, err := Open(context.Background(), raw)
	if err != nil {
		t.Fatalf("Open(%q): %v", raw, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func sqlitePath(t *testing.T, b backend.Leases) string {
	t.Helper()
	sb, ok := b.(*sqlite.Backend)
	if !ok {
		t.Fatalf("backend is %T, want *sqlite.Backend", b)
	}
	return sb.Path()
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

// TestOpenLedger: jobs and runs need a ledger; OpenLedger passes a backend
// that keeps one and refuses, by name, one that does not.
func TestOpenLedger(t *testing.T) {
	b, err := OpenLedger(context.Background(), "memory://")
	if err != nil {
		t.Fatalf("OpenLedger(memory://): %v", err)
	}
	b.Close()
	var hosts []string
	for range 3 {
		hosts = append(hosts, testserver.Redis(t).Addr())
	}
	_, err = OpenLedger(context.Background(), "redlock://"+strings.Join(hosts, ","))
	if !errors.Is(err, backend.ErrNoLedger) || !strings.Contains(err.Error(), `"redlock"`) {
		t.Fatalf("OpenLedger(redlock) = %v, want ErrNoLedger naming redlock", err)
	}
}
