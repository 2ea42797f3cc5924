package testserver

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	driver "github.com/go-sql-driver/mysql"
)

// DefaultMySQLURL is the machine's shared MariaDB service.
const DefaultMySQLURL = "mysql://root@127.0.0.1:3306/test"

// MySQLURL returns the URL of the shared MySQL/MariaDB server for tests:
// $LEASEHOLD_TEST_MYSQL_URL, or DefaultMySQLURL (mysql://user:pass@host:port/db).
// It skips the test (fails it when CI=true) when the server does not
// answer within 5 s.
func MySQLURL(t TB) string {
	t.Helper()
	u := os.Getenv("LEASEHOLD_TEST_MYSQL_URL")
	if u == "" {
		u = DefaultMySQLURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := mysqlPing(ctx, u); err != nil {
		skipOrFail(t, "testserver: MySQL at %s unreachable: %v", redactURL(u), err)
	}
	return u
}

// mysqlConfig turns mysql://user:pass@host:port/db into a driver config.
func mysqlConfig(rawURL string) (*driver.Config, error) {
	rest, ok := strings.CutPrefix(rawURL, "mysql://")
	if !ok {
		return nil, fmt.Errorf("url %s is not mysql://", redactURL(rawURL))
	}
	cfg := driver.NewConfig()
	userinfo, hostdb, ok := strings.Cut(rest, "@")
	if !ok {
		userinfo, hostdb = "", rest
	}
	cfg.User, cfg.Passwd, _ = strings.Cut(userinfo, ":")
	cfg.Net = "tcp"
	cfg.Addr, cfg.DBName, _ = strings.Cut(hostdb, "/")
	cfg.DBName, _, _ = strings.Cut(cfg.DBName, "?")
	return cfg, nil
}

func mysqlPing(ctx context.Context, rawURL string) error {
	cfg, err := mysqlConfig(rawURL)
	if err != nil {
		return err
	}
	conn, err := driver.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	return db.PingContext(ctx)
}

// MySQLExec runs statements on the server at rawURL (e.g. CREATE
// DATABASE for a test).
func MySQLExec(t TB, rawURL string, stmts ...string) {
	t.Helper()
	cfg, err := mysqlConfig(rawURL)
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	conn, err := driver.NewConnector(cfg)
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("testserver: %s: %v", s, err)
		}
	}
}

// MariaDB starts a private mariadbd (mariadb-install-db on first start) on
// a free port with its data in a temp dir; connect with MariaDBURL.
func MariaDB(t TB, extra ...string) *Server {
	t.Helper()
	for _, b := range []string{"mariadbd", "mariadb-install-db"} {
		if _, err := exec.LookPath(b); err != nil {
			skipOrFail(t, "testserver: %s not found: %v", b, err)
		}
	}
	return Start(t, Spec{
		Name:   "mariadb",
		Binary: "mariadbd",
		Args: func(port int, dir string) []string {
			data := filepath.Join(dir, "data")
			if _, err := os.Stat(filepath.Join(data, "mysql")); err != nil {
				// --no-defaults first: the system's my.cnf (user=mysql,
				// its own datadir and socket) must not apply.
				out, err := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+data, "--user=root",
					"--auth-root-authentication-method=normal", "--skip-test-db").CombinedOutput()
				if err != nil {
					t.Fatalf("testserver: mariadb-install-db: %v\n%s", err, out)
				}
			}
			args := []string{"--no-defaults", "--datadir=" + data, "--port=" + strconv.Itoa(port),
				"--bind-address=127.0.0.1", "--socket=" + filepath.Join(dir, "s"), "--user=root",
				"--skip-grant-tables=0", "--innodb-buffer-pool-size=32M", "--skip-log-bin"}
			return append(args, extra...)
		},
		Ready: func(ctx context.Context, addr string) error {
			return mysqlPing(ctx, "mysql://root@"+addr+"/mysql")
		},
		StartTimeout: 60 * time.Second,
	})
}

// MariaDBURL is the URL of database "mysql" as root on a server started by
// MariaDB.
func MariaDBURL(s *Server) string { return fmt.Sprintf("mysql://root@%s/mysql", s.Addr()) }
