// Package mysql is the MariaDB leasehold backend, written for MySQL 8 as
// well: leases and the run ledger in InnoDB tables, through
// go-sql-driver/mysql.
//
// Tested: MariaDB 10.11 only (the conformance suite, process and proxy
// fault tests, a server crash and restart, TLS). MySQL 8 is NOT tested —
// no MySQL server can be had on the machines this is developed on — so it
// is not claimed as supported. The SQL keeps to what both servers document
// (ON DUPLICATE KEY UPDATE with VALUES(), which MySQL 8.0.20+ deprecates
// but still runs, with a warning; LAST_INSERT_ID(expr); NOW(6); GET_LOCK);
// run this package's tests against a MySQL 8 server
// (LEASEHOLD_TEST_MYSQL_URL) before relying on it there.
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
//     at every commit), read at Open and again by RefreshCapabilities
//     (doctor and the daemon call it).
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
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/closegate"
	"github.com/leasehold/leasehold/internal/declared"
	"github.com/leasehold/leasehold/internal/guard"
	"github.com/leasehold/leasehold/internal/sqlledger"
)

// MinTTL is the shortest lease the MySQL backend grants.
const MinTTL = time.Millisecond

const schemaVersion = 1

// Option configures Open.
type Option func(*config) error

type config struct{ prefix string }

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// WithTablePrefix prefixes every table name (default "leasehold_"). It must
// match [a-z_][a-z0-9_]{0,39}.
func WithTablePrefix(p string) Option {
	return func(c *config) error {
		if !identRE.MatchString(p) {
			return fmt.Errorf("%w: mysql WithTablePrefix(%q): does not match [a-z_][a-z0-9_]{0,39}", backend.ErrInvalid, p)
		}
		c.prefix = p
		return nil
	}
}

// Backend is the MySQL/MariaDB backend. It is safe for concurrent use; any
// number of processes may share the tables.
type Backend struct {
	db     *sql.DB
	ownsDB bool // made by Open/OpenConfig: Close closes it
	dbName string
	prefix string
	caps   declared.Latest // as read at Open or the latest RefreshCapabilities

	tLeases, tJobs, tRuns, tMeta, tRecords string

	stmts stmtCache // the claim path's prepared statements (stmts.go)

	gate   closegate.Gate
	g      guard.Guard        // checks, names failures; closed: gate.Check, and the steps Enter the gate
	led    *sqlledger.Ledger  // the ledger's rules and reads, written once
	leases *sqlledger.Leases  // the lease layer, written once but for acquire
	recs   *sqlledger.Records // the record store, written once
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
	c, err := options(opts)
	if err != nil {
		return nil, err
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
	b := newBackend(db, true, cfg.DBName, c.prefix)
	if err := b.init(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("mysql: open %s@%s/%s: %w", cfg.User, cfg.Addr, cfg.DBName, err)
	}
	return b, nil
}

func options(opts []Option) (config, error) {
	c := config{prefix: "leasehold_"}
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("%w: nil mysql option", backend.ErrInvalid)
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

func newBackend(db *sql.DB, owns bool, dbName, prefix string) *Backend {
	b := &Backend{db: db, ownsDB: owns, dbName: dbName, prefix: prefix}
	q := func(n string) string { return "`" + prefix + n + "`" }
	b.tLeases, b.tJobs, b.tRuns, b.tMeta, b.tRecords = q("leases"), q("jobs"), q("runs"), q("meta"), q("records")
	b.g = guard.Guard{Name: "mysql", MinTTL: MinTTL, Closed: b.gate.Check}
	b.led = newLedger(b)
	b.leases = newLeases(b)
	b.recs = newRecords(b)
	return b
}

// New returns a backend over a *sql.DB the application already has, in its
// current database; Close does not close db. db's connections must have
// been opened with the settings ParseURL sets — parseTime=true, loc=UTC,
// clientFoundRows=true and time_zone='+00:00' (in a DSN:
// "?parseTime=true&clientFoundRows=true&time_zone=%27%2B00%3A00%27") —
// which New checks on one connection, failing with ErrSessionUnsuitable (changing
// nothing) when one is missing: without them expiry instants would be
// misread, and a guarded UPDATE that changes nothing would look like a lost
// lease.
func New(ctx context.Context, db *sql.DB, opts ...Option) (*Backend, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: mysql db is nil", backend.ErrInvalid)
	}
	c, err := options(opts)
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("mysql: new: %w", err)
	}
	defer conn.Close()
	var (
		tz     string
		now    any
		dbName sql.NullString
	)
	if err := conn.QueryRowContext(ctx, `SELECT @@session.time_zone, NOW(6), DATABASE()`).Scan(&tz, &now, &dbName); err != nil {
		return nil, fmt.Errorf("mysql: new: read the session: %w", err)
	}
	if tz != "+00:00" {
		return nil, fmt.Errorf("%w: session time_zone is %q, want '+00:00' (DSN parameter time_zone=%%27%%2B00%%3A00%%27)", ErrSessionUnsuitable, tz)
	}
	if tm, ok := now.(time.Time); !ok || tm.Location() != time.UTC {
		return nil, fmt.Errorf("%w: DATETIME values arrive as %T, want time.Time in UTC (DSN parameters parseTime=true, loc=UTC)", ErrSessionUnsuitable, now)
	}
	if !dbName.Valid || dbName.String == "" {
		return nil, fmt.Errorf("%w: the connection has no current database", ErrSessionUnsuitable)
	}
	if err := probeFoundRows(ctx, conn); err != nil {
		return nil, err
	}
	b := newBackend(db, false, dbName.String, c.prefix)
	if err := b.init(ctx); err != nil {
		return nil, fmt.Errorf("mysql: new in database %s: %w", dbName.String, err)
	}
	return b, nil
}

func (b *Backend) init(ctx context.Context) error {
	if err := b.readDurability(ctx); err != nil {
		return err
	}
	return b.migrate(ctx)
}

// readDurability reads innodb_flush_log_at_trx_commit and declares
// DurableFencing by it; false, if it cannot be read.
func (b *Backend) readDurability(ctx context.Context) error {
	c := backend.Capabilities{
		Name:         "mysql",
		ServerClock:  true, // NOW(6) of the one server, in a +00:00 session
		SafeFencing:  true,
		PushEvents:   false,
		MultiProcess: true,
		MinTTL:       MinTTL,
		ReadAt:       time.Now(),
	}
	defer func() { b.caps.Offer(c) }()
	var flush int
	if err := b.db.QueryRowContext(ctx, `SELECT @@innodb_flush_log_at_trx_commit`).Scan(&flush); err != nil {
		return fmt.Errorf("mysql: read innodb_flush_log_at_trx_commit (DurableFencing is declared false until it can be read): %w", err)
	}
	c.DurableFencing = flush == 1
	return nil
}

// RefreshCapabilities implements backend.CapabilityRefresher: it reads
// innodb_flush_log_at_trx_commit again (SET GLOBAL changes it under a
// running backend) and returns the declaration it decides, which
// Capabilities returns from then on. If it cannot be read, DurableFencing
// is declared false and the error says why.
func (b *Backend) RefreshCapabilities(ctx context.Context) (backend.Capabilities, error) {
	err := b.readDurability(ctx)
	return b.caps.Load(), err
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
	// Tables already at the current version are seen without the lock:
	// GET_LOCK names are server-wide and computable from the database's
	// name, so another user holding it must delay only a migration, not
	// every open (and an up-to-date open needs no CREATE grant).
	var v int
	err = conn.QueryRowContext(ctx, `SELECT value FROM `+b.tMeta+` WHERE name = 'schema_version'`).Scan(&v)
	var me *driver.MySQLError
	switch {
	case err == nil && v > schemaVersion:
		return fmt.Errorf("%w: tables %s* have version %d, this code knows up to %d; upgrade leasehold", ErrSchemaTooNew, b.prefix, v, schemaVersion)
	case err == nil && v == schemaVersion:
		// Up to date, unless the records table (additive, not versioned:
		// recordsTable) is missing.
		var x int
		err := conn.QueryRowContext(ctx, `SELECT 1 FROM `+b.tRecords+` LIMIT 0`).Scan(&x)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case !isErr(err, 1146): // 1146: no such table
			return err
		}
	case err == nil, errors.Is(err, sql.ErrNoRows), errors.As(err, &me) && me.Number == 1146: // older, empty, or no table yet
	default:
		return err
	}
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
	v = 0
	err = conn.QueryRowContext(ctx, `SELECT value FROM `+b.tMeta+` WHERE name = 'schema_version'`).Scan(&v)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if v > schemaVersion {
		return fmt.Errorf("%w: tables %s* have version %d, this code knows up to %d; upgrade leasehold", ErrSchemaTooNew, b.prefix, v, schemaVersion)
	}
	if v == schemaVersion {
		_, err := conn.ExecContext(ctx, b.recordsTable(opts))
		return err
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
		b.recordsTable(opts),
		`INSERT INTO ` + b.tMeta + ` (name, value) VALUES ('schema_version', 1) ON DUPLICATE KEY UPDATE value = 1`,
	}
	for _, s := range stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// recordsTable is the record store's table (backend.Records,
// sqlledger.Records), with the table options opts: one row per record,
// never changed once inserted. name is the key (VARBINARY(512), compared
// byte for byte, as the runs' job: "A" and "a" differ; with seq's 8 bytes
// the primary key stays within InnoDB's 3072-byte index limit), seq orders
// a name's records, value is the record's text (utf8mb4 TEXT, up to 65535
// bytes, so backend.MaxRecordValueLen is stored exactly; utf8mb4_bin),
// instance and nonce its creator (as the runs store owners), expires the
// instant from which PruneRecords may delete it (NULL: never; DATETIME(3),
// as the runs' instants). The index by_expires serves PruneRecords.
//
// The table is additive: it is not a schema version. migrate creates it
// whenever it is missing, without changing the version, so that an older
// release (which checks the version, ErrSchemaTooNew) keeps working on
// tables this release has opened; it never reads the table.
func (b *Backend) recordsTable(opts string) string {
	return `CREATE TABLE IF NOT EXISTS ` + b.tRecords + ` (
			name     VARBINARY(512) NOT NULL,
			seq      BIGINT NOT NULL,
			value    TEXT NOT NULL,
			instance VARBINARY(128) NOT NULL,
			nonce    BINARY(16) NOT NULL,
			expires  DATETIME(3) NULL,
			PRIMARY KEY (name, seq),
			KEY by_expires (expires))` + opts
}

// Capabilities reports the backend's guarantees; DurableFencing reflects
// innodb_flush_log_at_trx_commit as read at Open or by the latest
// RefreshCapabilities (at ReadAt).
func (b *Backend) Capabilities() backend.Capabilities { return b.caps.Load() }

// DB returns the database handle the backend uses.
func (b *Backend) DB() *sql.DB { return b.db }

// Database returns the name of the database that holds the tables.
func (b *Backend) Database() string { return b.dbName }

// Prefix returns the table prefix.
func (b *Backend) Prefix() string { return b.prefix }

// probeFoundRows checks clientFoundRows: an UPDATE that matches a row but
// changes nothing must count it. The probe is a temporary table of this
// connection (so New needs the CREATE TEMPORARY TABLES privilege), dropped
// at once; the database is not changed.
func probeFoundRows(ctx context.Context, conn *sql.Conn) error {
	const tbl = "leasehold_found_rows_probe"
	for _, q := range []string{`DROP TEMPORARY TABLE IF EXISTS ` + tbl, `CREATE TEMPORARY TABLE ` + tbl + ` (x INT)`, `INSERT INTO ` + tbl + ` VALUES (1)`} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("mysql: new: probe clientFoundRows: %w", err)
		}
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `DROP TEMPORARY TABLE IF EXISTS `+tbl)
	res, err := conn.ExecContext(ctx, `UPDATE `+tbl+` SET x = x`)
	if err != nil {
		return fmt.Errorf("mysql: new: probe clientFoundRows: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("mysql: new: probe clientFoundRows: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("%w: an UPDATE that changes nothing reports %d rows, want 1 (DSN parameter clientFoundRows=true)", ErrSessionUnsuitable, n)
	}
	return nil
}

// Close closes the connection pool when Open or OpenConfig made it (not a
// *sql.DB given to New); leases stay in the database. Later calls fail
// with ErrClosed.
func (b *Backend) Close() error {
	if !b.gate.Shut() {
		return nil
	}
	// Every call has left (they hold the gate). The rest runs with the gate
	// shut, so that a call made meanwhile gets ErrClosed at once rather than
	// wait for a statement's close, which waits for the connections it was
	// prepared on (the application's, with a *sql.DB given to New).
	b.stmts.closeAll()
	if !b.ownsDB {
		return nil
	}
	return b.db.Close()
}

// stepErr classifies a database error (a refusal) and adds the context's
// error when the context ended (so errors.Is(err, context.Canceled)
// works); the guard names the call (sqlledger.Dialect.Err).
func stepErr(ctx context.Context, err error) error {
	var me *driver.MySQLError
	if errors.As(err, &me) && refusedErrors[me.Number] {
		err = backend.Refused(err, true) // the statement did not run; its transaction is rolled back
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%w)", err, cerr)
	}
	return err
}

// refusedErrors are the server errors of a refusal for want of permission
// (backend.ErrRefused): database access denied (1044), access denied
// (1045), command denied on a table (1142) or column (1143), a privilege
// missing (1227).
var refusedErrors = map[uint16]bool{1044: true, 1045: true, 1142: true, 1143: true, 1227: true}

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

func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable url)"
	}
	return u.Redacted()
}
