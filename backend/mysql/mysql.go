// Package mysql is the MySQL 8 / MariaDB (10.6+) leasehold backend: leases
// and the run ledger in InnoDB tables, through go-sql-driver/mysql. It is
// tested on MariaDB 10.11 and written for MySQL 8 as well.
//
// What it guarantees, and why:
//
//   - Grant exclusion. Acquire is one INSERT … ON DUPLICATE KEY UPDATE whose
//     assignments change the row only when its lease is free or expired by
//     NOW(6); InnoDB locks the row, so concurrent acquires are serialised and
//     each sees the last committed holder. ODKU assigns columns left to
//     right and a later IF() sees the values already assigned, so every
//     condition tests expires_at only, and expires_at is assigned last. The
//     new token is returned through LAST_INSERT_ID(expr), in the same
//     statement. Deadlocks (1213) are retried transparently.
//   - One clock. Expiry is judged by the server's NOW(6) in every statement
//     (the statement's start: if a statement waited for a lock, NOW(6) is
//     earlier than the real time, which only makes leases judged live
//     longer and new expiries earlier — the safe direction). Every
//     connection sets time_zone = '+00:00': with SYSTEM, NOW(6) repeats an
//     hour at the autumn clock change.
//   - Keys are VARBINARY, compared byte for byte (the default
//     utf8mb4_general_ci collation would make "Job" equal "job ", case
//     insensitive and PAD SPACE).
//   - Fencing. The token is a counter in the lease row; Release sets
//     expires_at to NULL and keeps the row, so tokens only grow. Claim
//     tokens come from a per-job counter row that Prune never touches.
//   - Claims are a plain INSERT; a duplicate-key error (1062) means "lost
//     the race". Never INSERT IGNORE, which turns every error (a truncated
//     value included) into a warning, so that "0 rows" would not prove the
//     occurrence existed. (SELECT … FOR UPDATE on a missing row at READ
//     COMMITTED locks nothing, so it cannot guard an insert either.)
//   - Durability. Capabilities().DurableFencing is true only when the
//     server's innodb_flush_log_at_trx_commit is 1 (the redo log is flushed
//     at every commit), read at Open.
//
// There is no push of release events (PushEvents is false): waiters poll
// with Acquire. Nothing here can make a paused process stop acting on an
// expired lease: holders check their deadline, resources check the token.
package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/backend"
)

// MinTTL is the shortest lease the MySQL backend grants.
const MinTTL = time.Millisecond

const schemaVersion = 1

// ErrSchemaTooNew: the tables were created by a newer leasehold.
var ErrSchemaTooNew = errors.New("leasehold/mysql: schema is newer than this code")

// Option configures Open.
type Option func(*config) error

type config struct{ prefix string }

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// WithTablePrefix prefixes every table name (default "leasehold_"). It must
// match [a-z_][a-z0-9_]{0,39}.
func WithTablePrefix(p string) Option {
	return func(c *config) error {
		if !identRE.MatchString(p) {
			return fmt.Errorf("%w: mysql table prefix %q does not match [a-z_][a-z0-9_]{0,39}", backend.ErrInvalid, p)
		}
		c.prefix = p
		return nil
	}
}

// Backend is the MySQL/MariaDB backend. It is safe for concurrent use; any
// number of processes may share the tables.
type Backend struct {
	db      *sql.DB
	dbName  string
	prefix  string
	durable bool

	tLeases, tJobs, tRuns, tMeta string

	mu     sync.RWMutex
	closed bool
}

var _ backend.Backend = (*Backend)(nil)

// ParseURL turns mysql://user:pass@host:port/db?tls=true into a driver
// configuration with the settings the backend needs (UTC session time
// zone, parsed times, found-rows counts). The password may instead come
// from $MYSQL_PWD. Accepted query parameters: tls (true, false,
// skip-verify, preferred) and timeout (a Go duration). Errors never
// contain the password.
func ParseURL(rawURL string) (*driver.Config, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "mysql" {
		return nil, fmt.Errorf("%w: mysql url %s is not mysql://user:pass@host:port/db", backend.ErrInvalid, redact(rawURL))
	}
	cfg := driver.NewConfig()
	cfg.Net = "tcp"
	cfg.Addr = u.Host
	if u.Port() == "" {
		cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	if cfg.DBName == "" || strings.Contains(cfg.DBName, "/") {
		return nil, fmt.Errorf("%w: mysql url %s names no database", backend.ErrInvalid, u.Redacted())
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		if p, ok := u.User.Password(); ok {
			cfg.Passwd = p
		}
	}
	if cfg.Passwd == "" {
		cfg.Passwd = os.Getenv("MYSQL_PWD")
	}
	for k, vs := range u.Query() {
		v := vs[len(vs)-1]
		switch k {
		case "tls":
			cfg.TLSConfig = v
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("%w: mysql url parameter timeout %q is not a positive duration", backend.ErrInvalid, v)
			}
			cfg.Timeout = d
		default:
			return nil, fmt.Errorf("%w: mysql url parameter %q is not supported (tls, timeout)", backend.ErrInvalid, k)
		}
	}
	if err := setSession(cfg); err != nil {
		return nil, fmt.Errorf("%w: mysql url %s: %v", backend.ErrInvalid, u.Redacted(), err)
	}
	return cfg, nil
}

// setSession applies the settings every connection needs.
func setSession(cfg *driver.Config) error {
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.ClientFoundRows = true // guarded UPDATEs count matched rows
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	return nil
}

// Open connects to the database named by rawURL (see ParseURL) and creates
// or checks the tables.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	cfg, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return OpenConfig(ctx, cfg, opts...)
}

// OpenConfig is Open with a driver configuration (its session settings are
// overridden as ParseURL does).
func OpenConfig(ctx context.Context, cfg *driver.Config, opts ...Option) (*Backend, error) {
	c := config{prefix: "leasehold_"}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil mysql option", backend.ErrInvalid)
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	cfg = cfg.Clone()
	if err := setSession(cfg); err != nil {
		return nil, err
	}
	conn, err := driver.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: mysql config for %s@%s/%s: %v", backend.ErrInvalid, cfg.User, cfg.Addr, cfg.DBName, err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxIdleConns(16)
	db.SetConnMaxIdleTime(5 * time.Minute)
	b := &Backend{db: db, dbName: cfg.DBName, prefix: c.prefix}
	q := func(n string) string { return "`" + c.prefix + n + "`" }
	b.tLeases, b.tJobs, b.tRuns, b.tMeta = q("leases"), q("jobs"), q("runs"), q("meta")
	if err := b.init(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("leasehold/mysql: open %s@%s/%s: %w", cfg.User, cfg.Addr, cfg.DBName, err)
	}
	return b, nil
}

func (b *Backend) init(ctx context.Context) error {
	var flush int
	if err := b.db.QueryRowContext(ctx, `SELECT @@innodb_flush_log_at_trx_commit`).Scan(&flush); err != nil {
		return err
	}
	b.durable = flush == 1
	return b.migrate(ctx)
}

// migrate creates the tables under a named lock (GET_LOCK), so processes
// starting together do not race. DDL commits implicitly in MySQL, so every
// statement is idempotent (IF NOT EXISTS) and the version is written last.
func (b *Backend) migrate(ctx context.Context) error {
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	lock := "leasehold migrate " + b.dbName + "." + b.prefix
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 60)`, lock).Scan(&got); err != nil {
		return err
	}
	if got.Int64 != 1 {
		return fmt.Errorf("schema lock %q not granted within 60s", lock)
	}
	defer conn.ExecContext(context.Background(), `SELECT RELEASE_LOCK(?)`, lock)
	const opts = ` ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+b.tMeta+` (name VARBINARY(64) PRIMARY KEY, value INT NOT NULL)`+opts); err != nil {
		return err
	}
	var v int
	err = conn.QueryRowContext(ctx, `SELECT value FROM `+b.tMeta+` WHERE name = 'schema_version'`).Scan(&v)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if v > schemaVersion {
		return fmt.Errorf("%w: tables %s* have version %d, this code knows up to %d; upgrade leasehold", ErrSchemaTooNew, b.prefix, v, schemaVersion)
	}
	if v == schemaVersion {
		return nil
	}
	stmts := []string{
		// One row per key, never deleted: token is the key's counter;
		// expires_at is NULL when the key is free.
		`CREATE TABLE IF NOT EXISTS ` + b.tLeases + ` (
			k          VARBINARY(512) NOT NULL PRIMARY KEY,
			instance   VARBINARY(128) NOT NULL,
			nonce      BINARY(16) NOT NULL,
			token      BIGINT UNSIGNED NOT NULL,
			expires_at DATETIME(6) NULL)` + opts,
		`CREATE TABLE IF NOT EXISTS ` + b.tJobs + ` (
			job          VARBINARY(512) NOT NULL PRIMARY KEY,
			counter      BIGINT UNSIGNED NOT NULL,
			high_at      DATETIME(3) NULL,
			high_version VARBINARY(128) NOT NULL DEFAULT '')` + opts,
		`CREATE TABLE IF NOT EXISTS ` + b.tRuns + ` (
			job          VARBINARY(512) NOT NULL,
			scheduled_at DATETIME(3) NOT NULL,
			spec_version VARBINARY(128) NOT NULL,
			instance     VARBINARY(128) NOT NULL,
			nonce        BINARY(16) NOT NULL,
			token        BIGINT UNSIGNED NOT NULL,
			attempt      INT NOT NULL,
			state        VARBINARY(16) NOT NULL,
			claimed_at   DATETIME(6) NOT NULL,
			finished_at  DATETIME(6) NULL,
			duration_ns  BIGINT NOT NULL DEFAULT 0,
			result       TEXT NOT NULL,
			error        TEXT NOT NULL,
			expires_at   DATETIME(6) NOT NULL,
			PRIMARY KEY (job, scheduled_at),
			KEY by_time (scheduled_at, job),
			KEY by_finish (finished_at),
			KEY by_running (job, state, expires_at),
			KEY by_state (state, scheduled_at))` + opts,
		`INSERT INTO ` + b.tMeta + ` (name, value) VALUES ('schema_version', 1) ON DUPLICATE KEY UPDATE value = 1`,
	}
	for _, s := range stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// Capabilities reports the backend's guarantees; DurableFencing reflects
// innodb_flush_log_at_trx_commit as read at Open.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Name:           "mysql",
		ServerClock:    true, // NOW(6) of the one server, in a +00:00 session
		SafeFencing:    true,
		DurableFencing: b.durable,
		PushEvents:     false,
		MultiProcess:   true,
		MinTTL:         MinTTL,
	}
}

// DB returns the database handle the backend uses.
func (b *Backend) DB() *sql.DB { return b.db }

// Database returns the name of the database that holds the tables.
func (b *Backend) Database() string { return b.dbName }

// Prefix returns the table prefix.
func (b *Backend) Prefix() string { return b.prefix }

// Close closes the connection pool; leases stay in the database.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	return b.db.Close()
}

func (b *Backend) enter() error {
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return backend.ErrClosed
	}
	return nil
}

func dbErr(ctx context.Context, what string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("leasehold/mysql: %s: %w (%w)", what, err, cerr)
	}
	return fmt.Errorf("leasehold/mysql: %s: %w", what, err)
}

// isErr reports whether err is the server error number n.
func isErr(err error, n uint16) bool {
	var me *driver.MySQLError
	return errors.As(err, &me) && me.Number == n
}

const (
	errDupEntry = 1062
	errDeadlock = 1213
)

// retryDeadlock runs fn again (up to 10 times) when InnoDB chose it as a
// deadlock victim: the transaction was rolled back and nothing applied.
func retryDeadlock(ctx context.Context, fn func() error) error {
	var err error
	for i := 0; i < 10; i++ {
		if err = fn(); !isErr(err, errDeadlock) {
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Duration(i+1) * time.Millisecond)
	}
	return err
}

func micros(d time.Duration) int64 { return int64((d + time.Microsecond - 1) / time.Microsecond) }

func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable url)"
	}
	return u.Redacted()
}

func ceilMs(t time.Time) time.Time {
	t = t.UTC()
	if r := t.Truncate(time.Millisecond); !r.Equal(t) {
		return r.Add(time.Millisecond)
	}
	return t
}

func setNonce(n *backend.Nonce, b []byte) error {
	if len(b) != len(n) {
		return fmt.Errorf("stored nonce has %d bytes, want %d", len(b), len(n))
	}
	copy(n[:], b)
	return nil
}
