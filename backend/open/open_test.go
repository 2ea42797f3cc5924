package open_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/open"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/backend/redlock"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/chaos/harness"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

func mustOpen(t *testing.T, raw string) backend.Leases {
	t.Helper()
	b, err := open.Open(context.Background(), raw)
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

// TestOpenEveryBackend opens every backend of the table through each of its
// schemes, against a real server (the harness's table starts one per
// backend), and checks the backend that answers is the one the row names
// and that LedgerOf agrees with its type (redlock's test shows it keeps no
// ledger).
func TestOpenEveryBackend(t *testing.T) {
	if err := harness.CheckTable(); err != nil {
		t.Error(err)
	}
	for _, d := range open.Backends() {
		t.Run(d.Name, func(t *testing.T) {
			raw, err := harness.StartURL(t, d.Name, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			for _, scheme := range d.Schemes {
				if scheme == "rediss" || scheme == "redlocks" {
					// TLS, which these servers do not speak (backend/redis's
					// tests cover rediss://).
					continue
				}
				u.Scheme = scheme
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				b, err := open.Open(ctx, u.String())
				cancel()
				if err != nil {
					t.Fatalf("Open(%s): %v", u.Redacted(), err)
				}
				if got := b.Capabilities().Name; got != d.Name {
					t.Errorf("Open(%s) opened %q, want %q", u.Redacted(), got, d.Name)
				}
				_, ledger := b.(backend.Ledger)
				if _, err := backend.LedgerOf(b); ledger != (err == nil) || (err != nil && !strings.Contains(err.Error(), `"`+d.Name+`"`)) {
					t.Errorf("%s: implements backend.Ledger %v, but LedgerOf says %v", d.Name, ledger, err)
				}
				if ledger != d.Ledger {
					t.Errorf("%s: implements backend.Ledger %v, but its row says Ledger: %v", d.Name, ledger, d.Ledger)
				}
				b.Close()
			}
		})
	}
}

// TestTable: names and schemes are unique, every row can be opened and
// described, and the schemes Schemes and Lookup report are the table's.
func TestTable(t *testing.T) {
	names, schemes := map[string]bool{}, map[string]bool{}
	for _, d := range open.Backends() {
		if d.Name == "" || len(d.Schemes) == 0 || d.Form == "" || d.Summary == "" || d.Open == nil {
			t.Errorf("row %+v: every field is needed", d)
		}
		if names[d.Name] {
			t.Errorf("backend %q twice", d.Name)
		}
		names[d.Name] = true
		for _, s := range d.Schemes {
			if schemes[s] || s != strings.ToLower(s) {
				t.Errorf("scheme %q twice or not lower case", s)
			}
			schemes[s] = true
			if got, ok := open.Lookup(strings.ToUpper(s)); !ok || got.Name != d.Name {
				t.Errorf("Lookup(%q) = %q, %v; want %q", s, got.Name, ok, d.Name)
			}
			if !strings.Contains(open.Help(), d.Form) {
				t.Errorf("Help() does not show %s's form", d.Name)
			}
		}
	}
	if got := open.Schemes(); len(got) != len(schemes) || !slices.IsSorted(got) {
		t.Errorf("Schemes() = %v, want the table's %d schemes sorted", got, len(schemes))
	}
}

// TestRedlockURLErrors: a bad redlock URL names the field and value, and
// never the password.
func TestRedlockURLErrors(t *testing.T) {
	cases := []struct{ raw, want string }{
		{"redlock://:hunter2@127.0.0.1:1,127.0.0.1:2", "2 nodes"},
		{"redlock://:hunter2@127.0.0.1:1", "1 nodes"},
		{"redlock://:hunter2@127.0.0.1:1,nohost,127.0.0.1:3", `node 1 host "nohost"`},
		{"redlock://:hunter2@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?node_timeout=soon", `node_timeout "soon"`},
		{"redlock://:hunter2@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?node_timeout=-1s", `node_timeout "-1s"`},
		{"redlock://:hunter2@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?flavour=x", "flavour"},
	}
	for _, c := range cases {
		b, err := open.Open(context.Background(), c.raw)
		if err == nil {
			b.Close()
			t.Errorf("Open(%q) succeeded", c.raw)
			continue
		}
		if !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%q) = %v, want ErrInvalid naming %q", c.raw, err, c.want)
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "%zz") {
			t.Errorf("Open(%q) = %q: the error shows the password", c.raw, err)
		}
	}
}

// TestBackendOpenShowsNoPartOfARawPassword: the backends' own Open (used
// without this package) refuse a URL whose raw password breaks its parse
// without quoting the password's start, as url.Parse's error does
// (invalid port ":hunter2" after host).
func TestBackendOpenShowsNoPartOfARawPassword(t *testing.T) {
	opens := map[string]func(string) error{
		"redis://:hunter2#x@127.0.0.1:1/0":  func(raw string) error { _, err := redis.Open(context.Background(), raw); return err },
		"redis://:hunter2%zz@127.0.0.1:1/0": func(raw string) error { _, err := redis.Open(context.Background(), raw); return err },
		"redlock://:hunter2/x@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3": func(raw string) error {
			_, err := redlock.Open(context.Background(), raw)
			return err
		},
	}
	for raw, open := range opens {
		err := open(raw)
		if err == nil || !errors.Is(err, backend.ErrInvalid) {
			t.Errorf("Open(%q) = %v, want an error wrapping ErrInvalid", raw, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "%zz") {
			t.Errorf("Open(%q) = %q: the error shows the password", raw, err)
		}
	}
}

// TestRedlockURLPassesParameters: the parameters of a redlock URL reach
// every node (a password the nodes require, the database) and the backend
// (prefix).
func TestRedlockURLPassesParameters(t *testing.T) {
	ctx := context.Background()
	var hosts []string
	var dbs []*goredis.Client
	for range 3 {
		addr := testserver.Redis(t).Addr()
		admin := goredis.NewClient(&goredis.Options{Addr: addr})
		defer admin.Close()
		if err := admin.Do(ctx, "ACL", "SETUSER", "app", "on", ">s3cret-pw", "~*", "&*", "+@all").Err(); err != nil {
			t.Fatalf("ACL SETUSER: %v", err)
		}
		db2 := goredis.NewClient(&goredis.Options{Addr: addr, DB: 2})
		defer db2.Close()
		hosts, dbs = append(hosts, addr), append(dbs, db2)
	}
	raw := "redlock://app:s3cret-pw@" + strings.Join(hosts, ",") + "/2?prefix=rl:&node_timeout=1s&dial_timeout=2s"
	b := mustOpen(t, raw)
	o := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	if _, err := b.Acquire(ctx, "k", o, time.Minute); err != nil {
		t.Fatalf("Acquire through %s: %v", raw, err)
	}
	for i, db2 := range dbs {
		if n, err := db2.Exists(ctx, "rl:lease:{k}").Result(); err != nil || n != 1 {
			t.Errorf("node %d: the lease key in db 2 under prefix rl: exists %d times (%v), want 1", i, n, err)
		}
	}
	wrong := "redlock://app:nope-pw@" + strings.Join(hosts, ",") + "/2"
	if b, err := open.Open(ctx, wrong); err == nil {
		b.Close()
		t.Fatalf("Open with a wrong password succeeded")
	} else if !strings.Contains(err.Error(), "node 0") || strings.Contains(err.Error(), "nope-pw") {
		t.Fatalf("Open with a wrong password = %v, want it to name node 0 and not the password", err)
	}
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
		{"consul://u:hunter2@db/x", []string{`"consul"`, "etcd, memory, mysql, postgres, postgresql, redis, rediss, redlock, redlocks, sqlite, zk"}},
		{"redis://u:hunter2@localhost:6379/0?flavour=x", []string{"flavour"}},
		{"memory://somewhere", []string{"memory://"}},
		{"sqlite://u:hunter2@" + dir + "/x.db", []string{"no user"}},
		{"sqlite://", []string{"no database path"}},
		{"sqlite://" + dir + "/x.db?busy_timeout=soon", []string{`busy_timeout "soon"`}},
		{"sqlite://" + dir + "/x.db?synchronous=off", []string{`synchronous "off"`}},
		{"sqlite://" + dir + "/x.db?cache=shared", []string{`unknown parameter "cache"`}},
		{"redis://:hunter2@[::1", []string{"malformed"}},
		// A password pasted raw (from a ${NAME} of the config, say) with a
		// character that ends the authority: url.Parse takes its start for
		// a port and quotes it in its error.
		{"postgres://u:hunter2#x@h/db", []string{"malformed", "percent-encoded"}},
		{"postgres://u:hunter2/x@h/db", []string{"malformed", "percent-encoded"}},
		{"mysql://u:hunter2?x@h:3306/db", []string{"malformed", "percent-encoded"}},
		{"redis://:hunter2%zz@h:6379/0", []string{"malformed", "invalid URL escape"}},
		// host:port without a scheme is a server, never a SQLite file.
		{"127.0.0.1:6379", []string{"host:port", "redis://127.0.0.1:6379", "./127.0.0.1:6379"}},
		{"localhost:6379", []string{"host:port", "known: etcd"}},
		{"[::1]:2379", []string{"host:port"}},
	}
	for _, c := range cases {
		b, err := open.Open(context.Background(), c.raw)
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
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "%zz") {
			t.Errorf("Open(%q) = %q: the error shows the password", c.raw, err)
		}
	}
	// A missing directory is an error from the SQLite backend naming the URL.
	missing := "sqlite://" + dir + "/nope/x.db"
	if b, err := open.Open(context.Background(), missing); err == nil {
		b.Close()
		t.Errorf("Open(%q) succeeded, want an error", missing)
	} else if !strings.Contains(err.Error(), "nope") {
		t.Errorf("Open(%q) = %q, want it to name the path", missing, err)
	}
}

func TestOpenRedis(t *testing.T) {
	srv := testserver.Redis(t)
	b, err := open.Open(context.Background(), "redis://"+srv.Addr()+"/0?prefix=t:")
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
		b, err := open.Open(ctx, raw)
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

// TestOpenHostPortCreatesNothing: a backend given as host:port is refused
// before any file is made (it used to become a SQLite file named
// "127.0.0.1:6379" in the working directory); "./name:1" stays a file.
func TestOpenHostPortCreatesNothing(t *testing.T) {
	t.Chdir(t.TempDir())
	if b, err := open.Open(context.Background(), "127.0.0.1:6379"); err == nil {
		b.Close()
		t.Fatal("Open(127.0.0.1:6379) succeeded")
	}
	if entries, _ := os.ReadDir("."); len(entries) != 0 {
		t.Fatalf("a refused Open left %d files behind (first %q)", len(entries), entries[0].Name())
	}
	b, err := open.Open(context.Background(), "./name:1")
	if err != nil {
		t.Fatalf("Open(./name:1), an explicit SQLite path: %v", err)
	}
	b.Close()
}
