// Package postgres is the PostgreSQL leasehold backend: leases and the run
// ledger in ordinary tables, reached through a pgx v5 pool (its own, from
// Open, or one the application already has, through New).
//
// What it guarantees, and why:
//
//   - Grant exclusion. Acquire is ONE statement, an INSERT … ON CONFLICT (key)
//     DO UPDATE whose WHERE clause lets the update happen only when the
//     current lease is free or expired. PostgreSQL serialises the conflicting
//     updates of one row, and re-evaluates the WHERE clause on the newest row
//     version after waiting, so two unexpired grants on one key never commit.
//   - One clock. Expiry is judged by the database server's clock_timestamp()
//     in every statement, never by the clients' clocks and never by now(),
//     which is the start of the transaction and goes stale inside a long one.
//   - Fencing. The token is a counter in the lease row; Release clears the
//     holder (expires_at becomes NULL) but keeps the row, and nothing ever
//     deletes lease rows, so tokens for a key only grow. Claim tokens come
//     from a per-job counter row that Prune never touches.
//   - Durability. A grant is as durable as the commit that made it.
//     Capabilities().DurableFencing is computed at New from the server, and
//     again by RefreshCapabilities (doctor and the daemon call it):
//     true when fsync is on and synchronous_commit is on, local,
//     remote_write or remote_apply (each of these returns from COMMIT only
//     after the WAL record is flushed on the primary, so a crash and restart
//     of the server cannot forget a grant); false when synchronous_commit is
//     off (a crash can lose the last commits, and a token could be handed
//     out twice). Surviving a fail-over to a standby additionally needs a
//     synchronous standby; that is not checked.
//   - Push events. Wait (backend.Notifier) listens on a dedicated
//     connection; once LISTEN is active it registers in the lease row
//     (wake_until, an UPDATE that also reads the holder), and Release sends
//     NOTIFY on one channel per schema and prefix only when the row it
//     releases has a registered waiter. The two UPDATEs lock the same row,
//     so either the registration commits first and the release sees it and
//     notifies, or the release commits first and the registration finds the
//     key free and wakes the waiter at once: no wake-up is lost. A release
//     nobody waits for sends no NOTIFY, because PostgreSQL serialises the
//     commits of notifying transactions on one global lock held across the
//     commit's WAL flush (they lose group commit); see docs/benchmarks.md.
//     Expiry is delivered by a timer set from the remaining time read from
//     the server.
//   - Fenced writes. Fence (and FenceRun) let a job write its side effect in
//     the same database, in its own transaction, fenced by its token.
//
// Nothing here can make a paused process stop acting on a lease that has
// expired: holders must check their deadline, and resources should check
// the fencing token (Fence does, for writes to this database).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/closegate"
	"github.com/leasehold/leasehold/internal/declared"
	"github.com/leasehold/leasehold/internal/guard"
	"github.com/leasehold/leasehold/internal/sqlledger"
)

// MinTTL is the shortest lease the PostgreSQL backend grants.
const MinTTL = time.Millisecond

// schemaVersion is the version of the tables this code creates and reads.
// Version 2 adds leases.wake_until (see Release and Wait).
const schemaVersion = 2

// Option configures New and Open.
type Option func(*config) error

type config struct {
	schema string
	prefix string
}

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// WithSchema sets the PostgreSQL schema that holds the tables (default
// "leasehold"; created if missing). It must match [a-z_][a-z0-9_]{0,39}.
func WithSchema(name string) Option {
	return func(c *config) error {
		if !identRE.MatchString(name) {
			return fmt.Errorf("%w: postgres WithSchema(%q): does not match [a-z_][a-z0-9_]{0,39}", backend.ErrInvalid, name)
		}
		c.schema = name
		return nil
	}
}

// WithTablePrefix prefixes every table name (default ""), so that several
// independent leasehold deployments can share one schema. It must match
// [a-z_][a-z0-9_]{0,39} or be empty.
func WithTablePrefix(p string) Option {
	return func(c *config) error {
		if p != "" && !identRE.MatchString(p) {
			return fmt.Errorf("%w: postgres WithTablePrefix(%q): does not match [a-z_][a-z0-9_]{0,39}", backend.ErrInvalid, p)
		}
		c.prefix = p
		return nil
	}
}

// Backend is the PostgreSQL backend. It is safe for concurrent use; any
// number of processes may share the tables.
type Backend struct {
	pool     *pgxpool.Pool
	ownsPool bool
	schema   string
	prefix   string
	caps     declared.Latest // as read at New or the latest RefreshCapabilities
	channel  string          // NOTIFY channel of this schema and prefix

	// Quoted, schema-qualified table names.
	tLeases, tJobs, tRuns, tMeta, tRecords string

	gate   closegate.Gate
	g      guard.Guard        // checks, names failures; closed: gate.Check, and the steps Enter the gate
	led    *sqlledger.Ledger  // the ledger's rules and reads, written once
	leases *sqlledger.Leases  // the lease layer, written once but for acquire and release
	recs   *sqlledger.Records // the record store, written once
	n      *notifier
}

var (
	_ backend.Backend  = (*Backend)(nil)
	_ backend.Notifier = (*Backend)(nil)
)

// Open connects to the database at connURL (a postgres:// URL or a
// key=value connection string understood by pgx; TLS through sslmode, the
// password from the URL or PGPASSWORD / ~/.pgpass) and returns a backend
// that owns its pool: Close closes it. Errors never contain the password.
// A postgres:// URL may also carry schema=NAME and table_prefix=P, taken as
// WithSchema and WithTablePrefix (options given here override them).
func Open(ctx context.Context, connURL string, opts ...Option) (*Backend, error) {
	connURL, urlOpts := urlOptions(connURL)
	opts = append(urlOpts, opts...)
	cfg, err := pgxpool.ParseConfig(connURL)
	if err != nil {
		// pgx redacts the password in its own messages; the URL is
		// redacted here too.
		return nil, fmt.Errorf("%w: postgres url %s: %v", backend.ErrInvalid, redact(connURL), err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect %s: %w", redact(connURL), err)
	}
	b, err := newBackend(ctx, pool, true, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return b, nil
}

// urlOptions takes leasehold's own parameters out of a postgres:// URL —
// schema=NAME (WithSchema) and table_prefix=P (WithTablePrefix) — so that a
// URL alone (the daemon's backend setting) can place a tenant in its schema.
// Other forms of connection string are returned unchanged.
func urlOptions(connURL string) (string, []Option) {
	if !strings.HasPrefix(connURL, "postgres://") && !strings.HasPrefix(connURL, "postgresql://") {
		return connURL, nil
	}
	u, err := url.Parse(connURL)
	if err != nil {
		return connURL, nil // pgx reports it
	}
	q := u.Query()
	var opts []Option
	if q.Has("schema") {
		opts = append(opts, WithSchema(q.Get("schema")))
		q.Del("schema")
	}
	if q.Has("table_prefix") {
		opts = append(opts, WithTablePrefix(q.Get("table_prefix")))
		q.Del("table_prefix")
	}
	if opts == nil {
		return connURL, nil
	}
	u.RawQuery = q.Encode()
	return u.String(), opts
}

// New returns a backend over a pool the application already has. Close does
// not close the pool. The pool's connections must not have
// synchronous_commit set differently from what New reads on one of them.
func New(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Backend, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: postgres pool is nil", backend.ErrInvalid)
	}
	return newBackend(ctx, pool, false, opts)
}

func newBackend(ctx context.Context, pool *pgxpool.Pool, owns bool, opts []Option) (*Backend, error) {
	cfg := config{schema: "leasehold"}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil postgres option", backend.ErrInvalid)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	b := layout(pool, owns, cfg)
	if err := b.readDurability(ctx); err != nil {
		return nil, err
	}
	if err := b.migrate(ctx); err != nil {
		return nil, err
	}
	b.n = newNotifier(b)
	return b, nil
}

// layout returns a Backend on pool naming the tables and the channel of
// cfg's schema and prefix, before anything is read or created.
func layout(pool *pgxpool.Pool, owns bool, cfg config) *Backend {
	b := &Backend{pool: pool, ownsPool: owns, schema: cfg.schema, prefix: cfg.prefix}
	tbl := func(name string) string { return pgx.Identifier{cfg.schema, cfg.prefix + name}.Sanitize() }
	b.tLeases, b.tJobs, b.tRuns, b.tMeta, b.tRecords = tbl("leases"), tbl("jobs"), tbl("runs"), tbl("meta"), tbl("records")
	b.g = guard.Guard{Name: "postgres", MinTTL: MinTTL, Closed: b.gate.Check}
	b.led = newLedger(b)
	b.leases = newLeases(b)
	b.recs = newRecords(b)
	h := fnv.New64a()
	h.Write([]byte(cfg.schema + "." + cfg.prefix))
	b.channel = fmt.Sprintf("leasehold_%016x", h.Sum64())
	return b
}

// readDurability reads fsync and synchronous_commit from the server and
// declares DurableFencing by them; false, if they cannot be read.
func (b *Backend) readDurability(ctx context.Context) error {
	c := backend.Capabilities{
		Name:         "postgres",
		ServerClock:  true, // clock_timestamp() of the one server
		SafeFencing:  true,
		PushEvents:   true,
		MultiProcess: true,
		MinTTL:       MinTTL,
		ReadAt:       time.Now(),
	}
	defer func() { b.caps.Offer(c) }()
	var fsync, syncCommit string
	err := b.pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit')`).Scan(&fsync, &syncCommit)
	if err != nil {
		return fmt.Errorf("postgres: read fsync and synchronous_commit (DurableFencing is declared false until they can be read): %w", err)
	}
	c.DurableFencing = fsync == "on" && syncCommit != "off"
	return nil
}

// RefreshCapabilities implements backend.CapabilityRefresher: it reads
// fsync and synchronous_commit again (ALTER SYSTEM and a reload change
// them under a running backend) and returns the declaration they decide,
// which Capabilities returns from then on. If they cannot be read,
// DurableFencing is declared false and the error says why.
func (b *Backend) RefreshCapabilities(ctx context.Context) (backend.Capabilities, error) {
	err := b.readDurability(ctx)
	return b.caps.Load(), err
}

// migrate creates or upgrades the tables under a transaction-scoped
// advisory lock, so that processes starting together do not race. Tables
// already at the current version are seen without the lock: advisory lock
// keys are database-wide and computable from the schema's name, so another
// role holding it must delay only a migration, not every open.
func (b *Backend) migrate(ctx context.Context) error {
	fail := func(err error) error {
		return fmt.Errorf("postgres: schema %q prefix %q: %w", b.schema, b.prefix, err)
	}
	if v, err := b.schemaVersionNow(ctx); err != nil {
		return fail(err)
	} else if v > schemaVersion {
		return fmt.Errorf("%w: schema %q prefix %q has version %d, this code knows up to %d; upgrade leasehold",
			ErrSchemaTooNew, b.schema, b.prefix, v, schemaVersion)
	} else if v == schemaVersion {
		if recs, err := b.tableExists(ctx, b.pool, b.tRecords); err != nil {
			return fail(err)
		} else if recs {
			return nil
		}
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('leasehold migrate ' || $1))`, b.schema+"."+b.prefix); err != nil {
		return fail(err)
	}
	// CREATE … IF NOT EXISTS needs the right to create even when the object
	// exists, so a role confined to a schema it was given (no CREATE on the
	// database, perhaps not on the schema either) could not open it: look
	// first, create only what is missing.
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, b.schema).Scan(&exists); err != nil {
		return fail(err)
	}
	if !exists {
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{b.schema}.Sanitize()); err != nil {
			return fail(err)
		}
	}
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, b.tMeta).Scan(&exists); err != nil {
		return fail(err)
	}
	if !exists {
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+b.tMeta+` (name text PRIMARY KEY, value integer NOT NULL)`); err != nil {
			return fail(err)
		}
	}
	var v int
	err = tx.QueryRow(ctx, `SELECT value FROM `+b.tMeta+` WHERE name = 'schema_version'`).Scan(&v)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		v = 0
	case err != nil:
		return fail(err)
	}
	if v > schemaVersion {
		return fmt.Errorf("%w: schema %q prefix %q has version %d, this code knows up to %d; upgrade leasehold",
			ErrSchemaTooNew, b.schema, b.prefix, v, schemaVersion)
	}
	var stmts []string
	if v < 1 {
		stmts = append(stmts, b.schemaV1()...)
	}
	if v < 2 {
		stmts = append(stmts, b.schemaV2()...)
	}
	// The records table is additive and not versioned (schemaRecords):
	// created here whenever it is missing, at any version.
	if recs, err := b.tableExists(ctx, tx, b.tRecords); err != nil {
		return fail(err)
	} else if !recs {
		stmts = append(stmts, b.schemaRecords()...)
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fail(err)
		}
	}
	if v < schemaVersion {
		if _, err := tx.Exec(ctx, `INSERT INTO `+b.tMeta+` (name, value) VALUES ('schema_version', $1)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`, schemaVersion); err != nil {
			return fail(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fail(err)
	}
	return nil
}

// tableExists reports whether the (qualified) table exists, through q
// (the pool, or the migration's transaction).
func (b *Backend) tableExists(ctx context.Context, q pgxQuerier, table string) (bool, error) {
	var exists bool
	err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists)
	return exists, err
}

// schemaVersionNow reads the tables' version without any lock: 0 when the
// meta table does not exist yet.
func (b *Backend) schemaVersionNow(ctx context.Context) (int, error) {
	var exists bool
	if err := b.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, b.tMeta).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var v int
	err := b.pool.QueryRow(ctx, `SELECT value FROM `+b.tMeta+` WHERE name = 'schema_version'`).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

// schemaV1 is version 1 of the tables.
func (b *Backend) schemaV1() []string {
	idx := func(name string) string { return pgx.Identifier{b.prefix + name}.Sanitize() }
	return []string{
		// One row per key, never deleted: token is the key's counter.
		// expires_at is NULL when the key is free. COLLATE "C" makes key
		// order and prefix ranges byte-wise.
		`CREATE TABLE IF NOT EXISTS ` + b.tLeases + ` (
			key        text COLLATE "C" PRIMARY KEY,
			instance   text,
			nonce      bytea,
			token      bigint NOT NULL,
			expires_at timestamptz
		)`,
		`CREATE TABLE IF NOT EXISTS ` + b.tJobs + ` (
			job          text COLLATE "C" PRIMARY KEY,
			counter      bigint NOT NULL,
			high_at      timestamptz,
			high_version text NOT NULL DEFAULT ''
		)`,
		`CREATE TABLE IF NOT EXISTS ` + b.tRuns + ` (
			job          text COLLATE "C" NOT NULL,
			scheduled_at timestamptz NOT NULL,
			spec_version text NOT NULL,
			instance     text NOT NULL,
			nonce        bytea NOT NULL,
			token        bigint NOT NULL,
			attempt      integer NOT NULL,
			state        text NOT NULL,
			claimed_at   timestamptz NOT NULL,
			finished_at  timestamptz,
			duration_ns  bigint NOT NULL DEFAULT 0,
			result       text NOT NULL DEFAULT '',
			error        text NOT NULL DEFAULT '',
			expires_at   timestamptz NOT NULL,
			PRIMARY KEY (job, scheduled_at)
		)`,
		// History, newest first (ListRuns without a job filter).
		`CREATE INDEX IF NOT EXISTS ` + idx("runs_by_time") + ` ON ` + b.tRuns + ` (scheduled_at DESC, job)`,
		// Prune: finished runs by finish time.
		`CREATE INDEX IF NOT EXISTS ` + idx("runs_finished") + ` ON ` + b.tRuns + ` (finished_at) WHERE finished_at IS NOT NULL`,
		// MaxRunning: running occurrences of a job.
		`CREATE INDEX IF NOT EXISTS ` + idx("runs_running") + ` ON ` + b.tRuns + ` (job, expires_at) WHERE state = 'running'`,
		// ListRuns by state.
		`CREATE INDEX IF NOT EXISTS ` + idx("runs_by_state") + ` ON ` + b.tRuns + ` (state, scheduled_at DESC)`,
	}
}

// schemaV2 adds wake_until to the leases: until then, some process waits
// for the key to be released and Release must NOTIFY. NULL or past: nobody
// waits, and Release sends no NOTIFY.
func (b *Backend) schemaV2() []string {
	return []string{`ALTER TABLE ` + b.tLeases + ` ADD COLUMN IF NOT EXISTS wake_until timestamptz`}
}

// schemaRecords is the record store's table (backend.Records,
// sqlledger.Records): one row per record, never changed once inserted.
// name is the key (COLLATE "C": byte-wise, as the jobs'), seq orders a
// name's records, value is the record's text, instance and nonce its
// creator (as the runs store owners), expires the instant from which
// PruneRecords may delete it (NULL: never; milliseconds, as the runs'
// instants). The index on expires serves PruneRecords (records without
// expires are not in it).
//
// The table is additive: it is not a schema version. migrate creates it
// whenever it is missing, without changing the version, so that an older
// release (which checks the version, ErrSchemaTooNew) keeps working on
// tables this release has opened; it never reads the table.
func (b *Backend) schemaRecords() []string {
	idx := func(name string) string { return pgx.Identifier{b.prefix + name}.Sanitize() }
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + b.tRecords + ` (
			name     text COLLATE "C" NOT NULL,
			seq      bigint NOT NULL,
			value    text NOT NULL,
			instance text NOT NULL,
			nonce    bytea NOT NULL,
			expires  timestamptz,
			PRIMARY KEY (name, seq)
		)`,
		`CREATE INDEX IF NOT EXISTS ` + idx("records_expires") + ` ON ` + b.tRecords + ` (expires) WHERE expires IS NOT NULL`,
	}
}

// Capabilities reports the backend's guarantees; DurableFencing reflects
// fsync and synchronous_commit as read from the server by New or the
// latest RefreshCapabilities (at ReadAt).
func (b *Backend) Capabilities() backend.Capabilities { return b.caps.Load() }

// Pool returns the pool the backend uses.
func (b *Backend) Pool() *pgxpool.Pool { return b.pool }

// Schema returns the schema that holds the tables.
func (b *Backend) Schema() string { return b.schema }

// Close stops the notifier and, when the backend was made by Open, closes
// the pool. Leases stay in the database. Later calls fail with ErrClosed.
func (b *Backend) Close() error {
	if !b.gate.Shut() {
		return nil
	}
	b.n.close()
	if b.ownsPool {
		b.pool.Close()
	}
	return nil
}

// dbErr wraps a database error of a call that no guard names (stepErr),
// naming what.
func dbErr(ctx context.Context, what string, err error) error {
	return fmt.Errorf("postgres: %s: %w", what, stepErr(ctx, err))
}

// stepErr classifies a database error (a refusal) and adds the context's
// error when the context ended (so errors.Is(err, context.Canceled)
// works); the guard names the call (sqlledger.Dialect.Err).
func stepErr(ctx context.Context, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && refusedCodes[pe.Code] {
		err = backend.Refused(err, true) // the statement did not run; its transaction is rolled back
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%w)", err, cerr)
	}
	return err
}

// refusedCodes are the SQLSTATEs of a refusal for want of permission:
// insufficient_privilege, invalid_authorization_specification,
// invalid_password (backend.ErrRefused).
var refusedCodes = map[string]bool{"42501": true, "28000": true, "28P01": true}

// redact returns connURL with any password replaced, for messages.
func redact(connURL string) string {
	u, err := url.Parse(connURL)
	if err != nil || u.Scheme == "" {
		return "(connection string)"
	}
	return u.Redacted()
}
