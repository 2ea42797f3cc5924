// Package sqlite is the embedded leasehold backend: leases and the run ledger
// in one SQLite database file that many processes on one host share, with no
// server to run. It uses modernc.org/sqlite (pure Go, no cgo).
//
// What it guarantees, and why:
//
//   - Grant exclusion. Every write is an IMMEDIATE transaction, so writers
//     from every process are serialised by SQLite's file locks; a grant reads
//     the current lease and writes the new one under that one lock. The
//     database is in WAL mode, and Open checks that it really is.
//   - One clock for every process. Expiry is judged on the host's
//     CLOCK_BOOTTIME, which all processes on the host share, which never
//     jumps when NTP or an operator steps the wall clock, and which keeps
//     counting through suspend. Each lease also records the kernel's boot id
//     (/proc/sys/kernel/random/boot_id): a lease written during another boot
//     is expired, so a reboot expires every lease.
//   - Fencing. Tokens come from a per-key counter table that release never
//     touches, and claim tokens from a per-job counter; both survive releases,
//     pruning and restarts of every process, because they are in the file.
//   - Durability. With synchronous=FULL (the default, see
//     WithSynchronousFull) every commit is on stable storage before the call
//     returns, so a token is never handed out twice even across a power loss.
//     Capabilities().DurableFencing is computed from the synchronous setting
//     read back from the database, never assumed.
//   - Local files only. SQLite's WAL relies on shared memory and POSIX locks
//     that network filesystems do not provide faithfully; Open refuses a
//     database whose directory is on NFS, SMB/CIFS, Ceph, 9p, AFS, Lustre,
//     GFS2 or OCFS2, and refuses ":memory:" (use backend/memory instead).
//
// Nothing here can make a paused process stop acting on a lease that has
// expired: holders must check their deadline and resources should check the
// fencing token. There is no push of release events between processes;
// waiters poll with Acquire.
//
// There is no New over a *sql.DB, unlike the server backends: the backend's
// correctness rests on how its connection was opened, and a handle the
// caller made could not be checked for all of it. Every transaction must
// begin IMMEDIATE (the driver's _txlock=immediate, invisible through
// database/sql), every connection needs the busy timeout and the
// synchronous level Capabilities reports, the process must use one
// connection (SetMaxOpenConns(1), which the caller could change later), and
// the file must be on a local filesystem, which Open checks from the path.
// Open takes the path and makes the connection; WithBusyTimeout and
// WithSynchronousFull are the settings a caller may choose.
//
// A program that uses this backend must not open the database file itself
// (os.Open and Close on it would drop SQLite's POSIX locks held by the
// process). The backend runs on Linux only; Open fails elsewhere.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/closegate"
	"github.com/leasehold/leasehold/internal/guard"
	"github.com/leasehold/leasehold/internal/sqlledger"
	"modernc.org/sqlite" // registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"
)

// MinTTL is the shortest lease the SQLite backend grants.
const MinTTL = time.Millisecond

// schemaVersion is the version of the schema this code creates and reads.
const schemaVersion = 1

// Option configures Open.
type Option func(*config) error

type config struct {
	busyTimeout time.Duration
	syncFull    bool
	bootID      string                // test hook: overrides the kernel's boot id
	mono        func() (int64, error) // test hook: CLOCK_BOOTTIME in ns
	wall        func() time.Time      // test hook: wall clock
}

// WithBusyTimeout sets how long a call waits for another process's write
// transaction before failing with SQLITE_BUSY (default 10s). It must be
// between 1ms and 10 minutes; it is rounded up to whole milliseconds.
func WithBusyTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Millisecond || d > 10*time.Minute {
			return fmt.Errorf("%w: sqlite WithBusyTimeout(%v): not in 1ms..10m", backend.ErrInvalid, d)
		}
		c.busyTimeout = d
		return nil
	}
}

// WithSynchronousFull selects PRAGMA synchronous=FULL (true, the default:
// every commit is synced, tokens are durable) or NORMAL (false: faster, but
// the last commits can be lost on power failure, so DurableFencing is false).
// The setting belongs to each process's connection: every process sharing
// the file must keep the default for grants to be durable whoever commits
// them.
func WithSynchronousFull(full bool) Option {
	return func(c *config) error {
		c.syncFull = full
		return nil
	}
}

// withBootID overrides the boot id read from the kernel (tests only).
func withBootID(id string) Option {
	return func(c *config) error {
		if id == "" {
			return fmt.Errorf("%w: boot id is empty", backend.ErrInvalid)
		}
		c.bootID = id
		return nil
	}
}

// withClocks overrides the monotonic and wall clocks (tests only).
func withClocks(mono func() (int64, error), wall func() time.Time) Option {
	return func(c *config) error {
		c.mono, c.wall = mono, wall
		return nil
	}
}

// Backend is the SQLite backend. Create it with Open; it is safe for
// concurrent use by many goroutines, and any number of processes on the host
// may open the same file.
type Backend struct {
	gate    closegate.Gate
	g       guard.Guard        // checks, names failures; closed: gate.Check, and write Enters the gate
	led     *sqlledger.Ledger  // the ledger's rules and reads, written once
	leases  *sqlledger.Leases  // the lease layer, written once but for its clock
	recs    *sqlledger.Records // the record store, written once
	db      *sql.DB
	path    string
	bootID  string
	mono    func() (int64, error)
	wall    func() time.Time
	durable bool
	stmts   [numStmts]*sql.Stmt
}

var _ backend.Backend = (*Backend)(nil)

// Open opens (creating if needed) the database file at path and returns a
// backend using it. The file's directory must exist and be on a local
// filesystem.
func Open(ctx context.Context, path string, opts ...Option) (*Backend, error) {
	cfg := config{busyTimeout: 10 * time.Second, syncFull: true, mono: bootTime, wall: time.Now}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil sqlite option", backend.ErrInvalid)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	switch {
	case path == "":
		return nil, fmt.Errorf("%w: sqlite database path is empty", backend.ErrInvalid)
	case path == ":memory:":
		return nil, fmt.Errorf("%w: sqlite database path %q is in memory; this backend is for files shared by processes (use backend/memory)", backend.ErrInvalid, path)
	case strings.HasPrefix(path, "file:"):
		return nil, fmt.Errorf("%w: sqlite database path %q is a URI; give a filesystem path", backend.ErrInvalid, path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: database path %q: %w", path, err)
	}
	if err := checkLocalFS(abs); err != nil {
		return nil, err
	}
	if err := ensurePrivate(abs); err != nil {
		return nil, err
	}
	if cfg.bootID == "" {
		if cfg.bootID, err = readBootID(); err != nil {
			return nil, err
		}
	}
	if _, err := cfg.mono(); err != nil {
		return nil, err
	}

	syncMode := "NORMAL"
	if cfg.syncFull {
		syncMode = "FULL"
	}
	ms := (cfg.busyTimeout + time.Millisecond - 1) / time.Millisecond
	u := url.URL{Scheme: "file", Path: abs}
	dsn := u.String() + fmt.Sprintf("?_txlock=immediate&_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(%s)", ms, syncMode)
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	// One connection per process: in-process writers queue in database/sql
	// rather than on SQLite's busy handler; other processes are handled by
	// busy_timeout.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	b := &Backend{db: db, path: abs, bootID: cfg.bootID, mono: cfg.mono, wall: cfg.wall}
	b.g = guard.Guard{Name: "sqlite", MinTTL: MinTTL, Closed: b.gate.Check}
	b.led = newLedger(b)
	b.leases = newLeases(b)
	b.recs = newRecords(b)
	if err := b.initRetryingBusy(ctx, cfg.busyTimeout); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// initRetryingBusy runs init, again while it fails with SQLITE_BUSY, for up
// to the busy timeout. Processes that open a new file together each hold a
// shared lock while turning it to WAL, which needs an exclusive one; SQLite
// fails that at once rather than call the busy handler (waiting would
// deadlock), so the wait is here. A try whose connection-string pragmas
// failed opens a new connection, which applies them again; the migration
// and the statements are each all or nothing. No try starts after the busy
// timeout, so Open returns within it plus the last try's own busy wait.
func (b *Backend) initRetryingBusy(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	pause := 5 * time.Millisecond
	for {
		err := b.init(ctx)
		wait := pause + rand.N(pause)
		if err == nil || !isBusy(err) || time.Now().Add(wait).After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("sqlite: open %s: %w (last: %v)", b.path, ctx.Err(), err)
		case <-t.C:
		}
		pause = min(2*pause, 200*time.Millisecond)
	}
}

// isBusy reports whether err is SQLITE_BUSY or one of its extended codes.
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// isInterrupt reports whether err is SQLITE_INTERRUPT (a context that
// ended interrupts the statement).
func isInterrupt(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_INTERRUPT
}

// init checks the live journal mode and synchronous setting and creates or
// checks the schema.
func (b *Backend) init(ctx context.Context) error {
	var mode string
	if err := b.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("sqlite: open %s: %w", b.path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("sqlite: open %s: journal_mode is %q, not wal", b.path, mode)
	}
	var syncLevel int
	if err := b.db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&syncLevel); err != nil {
		return fmt.Errorf("sqlite: open %s: %w", b.path, err)
	}
	b.durable = syncLevel >= 2 // FULL (2) or EXTRA (3)
	if err := b.migrate(ctx); err != nil {
		return err
	}
	return b.prepare(ctx)
}

// schema is version 1 of the database layout.
var schema = []string{
	// Lease rows are deleted on release; counters never are.
	`CREATE TABLE IF NOT EXISTS leases (
		key        TEXT PRIMARY KEY,
		instance   TEXT NOT NULL,
		nonce      BLOB NOT NULL,
		token      INTEGER NOT NULL,
		expires_ns INTEGER NOT NULL,
		boot_id    TEXT NOT NULL
	) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS counters (
		key   TEXT PRIMARY KEY,
		token INTEGER NOT NULL
	) WITHOUT ROWID`,
	// Per-job claim counter and high-water mark, kept apart from history.
	`CREATE TABLE IF NOT EXISTS jobs (
		job          TEXT PRIMARY KEY,
		counter      INTEGER NOT NULL,
		high_ms      INTEGER,
		high_version TEXT NOT NULL DEFAULT ''
	) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS runs (
		job            TEXT NOT NULL,
		scheduled_ms   INTEGER NOT NULL,
		spec_version   TEXT NOT NULL,
		instance       TEXT NOT NULL,
		nonce          BLOB NOT NULL,
		token          INTEGER NOT NULL,
		attempt        INTEGER NOT NULL,
		state          TEXT NOT NULL,
		claimed_at_ms  INTEGER NOT NULL,
		finished_at_ms INTEGER,
		duration_ns    INTEGER NOT NULL DEFAULT 0,
		result         TEXT NOT NULL DEFAULT '',
		error          TEXT NOT NULL DEFAULT '',
		expires_ns     INTEGER NOT NULL,
		boot_id        TEXT NOT NULL,
		PRIMARY KEY (job, scheduled_ms)
	)`,
	`CREATE INDEX IF NOT EXISTS runs_by_time ON runs (scheduled_ms DESC, job)`,
	`CREATE INDEX IF NOT EXISTS runs_by_finish ON runs (state, finished_at_ms)`,
	`CREATE INDEX IF NOT EXISTS runs_running ON runs (job) WHERE state = 'running'`,
}

// recordsSchema is the record store's table (backend.Records,
// sqlledger.Records): one row per record, never changed once inserted.
// name is the key (TEXT, compared byte for byte, as the runs' job), seq
// orders a name's records, value is the record's text, instance and nonce
// its creator (as the runs store owners), expires the instant from which
// PruneRecords may delete it, in Unix milliseconds (NULL: never; as the
// runs' instants, scheduled_ms). A rowid table, so that a prune's batch is
// chosen by rowid; the partial index on expires serves it.
//
// The table is additive: it is not a schema version. migrate creates it
// whenever it is missing, without changing the version, so that an older
// release (which checks the version, ErrSchemaTooNew) keeps working on a
// file this release has opened; it never reads the table.
var recordsSchema = []string{
	`CREATE TABLE IF NOT EXISTS records (
		name     TEXT NOT NULL,
		seq      INTEGER NOT NULL,
		value    TEXT NOT NULL,
		instance TEXT NOT NULL,
		nonce    BLOB NOT NULL,
		expires  INTEGER,
		PRIMARY KEY (name, seq)
	)`,
	`CREATE INDEX IF NOT EXISTS records_expires ON records (expires) WHERE expires IS NOT NULL`,
}

// migrate creates the schema in an immediate transaction, or checks the
// version of an existing one; the records table (recordsSchema) is
// created whenever it is missing, at any version.
func (b *Backend) migrate(ctx context.Context) error {
	fail := func(err error) error { return fmt.Errorf("sqlite: schema of %s: %w", b.path, err) }
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID`); err != nil {
		return fail(err)
	}
	var v int
	err = tx.QueryRowContext(ctx, `SELECT value FROM meta WHERE name = 'schema_version'`).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		v = 0
	case err != nil:
		return fail(err)
	}
	if v > schemaVersion {
		return fmt.Errorf("%w: %s has schema version %d, this code knows up to %d; upgrade leasehold", ErrSchemaTooNew, b.path, v, schemaVersion)
	}
	var stmts []string
	if v < schemaVersion {
		stmts = append(stmts, schema...)
	}
	stmts = append(stmts, recordsSchema...)
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fail(err)
		}
	}
	if v < schemaVersion {
		if _, err := tx.ExecContext(ctx, `INSERT INTO meta (name, value) VALUES ('schema_version', ?)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`, schemaVersion); err != nil {
			return fail(err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	return nil
}

// Capabilities reports the backend's guarantees. DurableFencing reflects the
// synchronous setting read back from the database at Open.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Name:           "sqlite",
		ServerClock:    true, // CLOCK_BOOTTIME, shared by every process on the host
		SafeFencing:    true,
		DurableFencing: b.durable,
		PushEvents:     false,
		MultiProcess:   true,
		MinTTL:         MinTTL,
	}
}

// Path returns the absolute path of the database file.
func (b *Backend) Path() string { return b.path }

// Close closes the database. Leases stay in the file until they expire or
// are released through another Backend; later calls fail with ErrClosed.
func (b *Backend) Close() error {
	if !b.gate.Shut() { // every call has left; later ones get ErrClosed
		return nil
	}
	for _, st := range b.stmts {
		if st != nil {
			st.Close()
		}
	}
	return b.db.Close()
}

// write runs fn in one immediate transaction, committing if fn returns nil.
// Errors from fn are returned as they are; errors from the database are
// classified (stepErr), for the guard to name.
func (b *Backend) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", backend.ErrNotApplied, err)
	}
	if err := b.gate.Enter(); err != nil {
		return err
	}
	defer b.gate.Leave()
	return b.inTx(ctx, fn)
}

// inTx runs fn in an immediate transaction (it waits, up to the busy
// timeout, for another connection's write to commit) and commits it, for a
// caller inside the gate.
func (b *Backend) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return stepErr(ctx, err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return stepErr(ctx, err)
	}
	return nil
}

// stepErr adds the context's error to a database error when the context
// ended (so errors.Is(err, context.Canceled) works); the guard names the
// call (sqlledger.Dialect.Err).
func stepErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%w)", err, cerr)
	}
	return err
}

// now reads the monotonic clock (a failure is the guard's to name).
func (b *Backend) now() (int64, error) { return b.mono() }

// fromMs converts stored milliseconds to a UTC time.
func fromMs(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
