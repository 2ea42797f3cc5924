package testserver

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresBinDir is where Debian's postgresql-15 package installs the
// server binaries.
const PostgresBinDir = "/usr/lib/postgresql/15/bin"

// DefaultPostgresURL is the machine's shared PostgreSQL service.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// skipOrFail skips the test locally and fails it when CI=true.
func skipOrFail(t TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format+" (CI=true: an untestable backend fails the run)", args...)
	}
	t.Skipf(format, args...)
}

// PostgresURL returns the URL of the shared PostgreSQL server for tests:
// $LEASEHOLD_TEST_POSTGRES_URL, or DefaultPostgresURL. It skips the test
// (fails it when CI=true) when the server does not answer within 5 s. The
// password, if any, never appears in messages.
func PostgresURL(t TB) string {
	t.Helper()
	u := os.Getenv("LEASEHOLD_TEST_POSTGRES_URL")
	if u == "" {
		u = DefaultPostgresURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := pgPing(ctx, u); err != nil {
		skipOrFail(t, "testserver: PostgreSQL at %s unreachable: %v", redactURL(u), err)
	}
	return u
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		return "(connection string)"
	}
	return u.Redacted()
}

func pgPing(ctx context.Context, connURL string) error {
	c, err := pgx.Connect(ctx, connURL)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return c.Ping(ctx)
}

// Postgres starts a private PostgreSQL server (initdb on first start, then
// the postmaster itself, both as the "postgres" OS user when the test runs
// as root) on a free port with its data in a temp dir. The returned
// Server's PID is the postmaster's, so Kill is a crash of the server and
// Start recovers from its WAL. Connect with PostgresServerURL. Stop is a
// "smart" shutdown: close client pools first (or use Kill).
func Postgres(t TB, extra ...string) *Server {
	t.Helper()
	postgres := filepath.Join(PostgresBinDir, "postgres")
	initdb := filepath.Join(PostgresBinDir, "initdb")
	for _, b := range []string{postgres, initdb} {
		if _, err := os.Stat(b); err != nil {
			skipOrFail(t, "testserver: PostgreSQL binary %s not found: %v", b, err)
		}
	}
	asPostgres := os.Geteuid() == 0
	var uid, gid int
	if asPostgres {
		u, err := user.Lookup("postgres")
		if err != nil {
			skipOrFail(t, "testserver: running as root and no postgres user: %v", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
	}
	// The postmaster replaces setpriv (no fork), so signals reach it.
	binary := postgres
	if asPostgres {
		binary = "/usr/bin/setpriv"
	}
	return Start(t, Spec{
		Name:   "postgres",
		Binary: binary,
		Args: func(port int, dir string) []string {
			data := filepath.Join(dir, "data")
			if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err != nil {
				pgInitdb(t, initdb, dir, data, asPostgres, uid, gid)
			}
			args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", dir,
				"-c", "listen_addresses=127.0.0.1", "-c", "shared_buffers=16MB", "-c", "max_connections=100"}
			args = append(args, extra...)
			if asPostgres {
				return append([]string{"--reuid=" + strconv.Itoa(uid), "--regid=" + strconv.Itoa(gid), "--init-groups", "--", postgres}, args...)
			}
			return args
		},
		Ready: func(ctx context.Context, addr string) error {
			return pgPing(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable")
		},
		StartTimeout: 60 * time.Second,
	})
}

// pgInitdb creates the cluster in data, owned by the postgres user when
// running as root (the test's temp dirs are made traversable for it).
func pgInitdb(t TB, initdb, dir, data string, asPostgres bool, uid, gid int) {
	t.Helper()
	cmd := exec.Command(initdb, "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "--no-instructions", "-E", "UTF8")
	if asPostgres {
		for d := dir; d != "/" && d != os.TempDir() && d != "."; d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatalf("testserver: chmod %s: %v", d, err)
			}
			if d == dir {
				if err := os.Chown(d, uid, gid); err != nil {
					t.Fatalf("testserver: chown %s: %v", d, err)
				}
			}
		}
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", initdb}, cmd.Args[1:]...)...)
	}
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testserver: initdb %s: %v\n%s", data, err, out)
	}
}

// PostgresServerURL is the URL of database "postgres" on a server started
// by Postgres.
func PostgresServerURL(s *Server) string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", s.Addr())
}
