package sqlledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// Scanner is a row: *sql.Row, *sql.Rows, pgx.Row, pgx.Rows.
type Scanner interface{ Scan(dest ...any) error }

// Rows is a result set: pgx.Rows, or *sql.Rows through Std.
type Rows interface {
	Scanner
	Next() bool
	Err() error
	Close()
}

// DB runs statements: the pool, or a transaction.
type DB interface {
	QueryRow(ctx context.Context, q string, args ...any) Scanner
	Query(ctx context.Context, q string, args ...any) (Rows, error)
	// Exec returns the number of rows the statement matched.
	Exec(ctx context.Context, q string, args ...any) (int64, error)
}

// StdQueryer is a *sql.DB or a *sql.Tx.
type StdQueryer interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
}

// Std is a database/sql handle as a DB.
type Std struct{ Q StdQueryer }

// QueryRow implements DB.
func (s Std) QueryRow(ctx context.Context, q string, args ...any) Scanner {
	return s.Q.QueryRowContext(ctx, q, args...)
}

// Query implements DB.
func (s Std) Query(ctx context.Context, q string, args ...any) (Rows, error) {
	rows, err := s.Q.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return stdRows{rows}, nil
}

// Exec implements DB.
func (s Std) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := s.Q.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// stdRows is *sql.Rows with Close as Rows has it (its error is the one
// Err reports after Next, or nothing that the caller can act on).
type stdRows struct{ *sql.Rows }

func (r stdRows) Close() { r.Rows.Close() }

// collect reads every row of a query's result (rows, err) with scan and
// closes it; a failure is wrapped by d.Err.
func collect[T any](ctx context.Context, d *Dialect, rows Rows, err error, scan func(Scanner) (T, error)) ([]T, error) {
	if err != nil {
		return nil, d.Err(ctx, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, d.Err(ctx, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, d.Err(ctx, err)
	}
	return out, nil
}

// ScanFunc reads one run.
type ScanFunc func(Scanner) (backend.Run, error)

// Gate admits calls until the backend is closed (closegate.Gate).
type Gate interface {
	Enter() error
	Leave()
}

// Ledger is the part of a SQL backend's ledger that is the same in every
// dialect. Each backend fills one in at New and hands its methods, the
// steps of a guard.Guard (which checks the arguments and the closed state,
// and names failures and answers), to its Guard.
type Ledger struct {
	D    *Dialect
	DB   DB   // the pool, for reads outside a transaction
	Gate Gate // the backend's closed state
	// Runs and Jobs are the tables' (qualified) names; Cols the columns
	// that Reader's ScanFunc reads.
	Runs, Jobs, Cols string
	// Reader returns how to read runs now: the same ScanFunc where the
	// database judges Expired (a column of Cols); SQLite reads its clock
	// first, and judges Expired by it.
	Reader func() (ScanFunc, error)
	// Write runs one writing statement outside a transaction and returns
	// the rows it matched; it enters Gate, retries what the database says
	// may be retried, and wraps failures with Dialect.Err.
	Write func(ctx context.Context, q string, args ...any) (int64, error)
	// PruneSQL is Prune's statement, whose placeholders take the
	// PruneBefore of olderThan and the batch size: deleting at most batch
	// finished runs whose finished_at is before it (the statement differs
	// by what the database can limit and lock; see each backend).
	PruneSQL    string
	PruneBefore func(olderThan time.Time) any
}

// ServerClock returns the Ledger of a dialect that judges expiry by the
// server's clock (Now): its runs are read as RunCols by ScanRun, and Write
// enters gate around exec, which runs one statement outside a transaction
// and wraps its failure. The caller adds PruneSQL and PruneBefore.
func ServerClock(d *Dialect, db DB, gate Gate, jobs, runs string, exec func(ctx context.Context, q string, args ...any) (int64, error)) *Ledger {
	return &Ledger{
		D: d, DB: db, Gate: gate, Jobs: jobs, Runs: runs, Cols: d.RunCols(),
		Reader: func() (ScanFunc, error) { return d.ScanRun, nil },
		Write: func(ctx context.Context, q string, args ...any) (int64, error) {
			if err := gate.Enter(); err != nil {
				return 0, err
			}
			defer gate.Leave()
			return exec(ctx, q, args...)
		},
	}
}

// occurrenceWhere selects one occurrence.
func (l *Ledger) occurrenceWhere() string { return ` WHERE job = ? AND ` + l.D.AtColumn + ` = ?` }

// Get reads the occurrence's record through q (the pool, or a transaction
// with lock the dialect's locking clause, e.g. " FOR UPDATE"), with the
// driver's NoRows when there is none.
func (l *Ledger) Get(ctx context.Context, q DB, scan ScanFunc, job string, at time.Time, lock string) (backend.Run, error) {
	return scan(q.QueryRow(ctx, l.D.Bind(`SELECT `+l.Cols+` FROM `+l.Runs+l.occurrenceWhere()+lock), job, l.D.Instant(at)))
}

// GetRun is the step of backend.Ledger's GetRun (guard.Guard.GetRun).
func (l *Ledger) GetRun(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	if err := l.Gate.Enter(); err != nil {
		return backend.Run{}, err
	}
	defer l.Gate.Leave()
	scan, err := l.Reader()
	if err != nil {
		return backend.Run{}, err
	}
	r, err := l.Get(ctx, l.DB, scan, job, backend.Instant(at), "")
	switch {
	case errors.Is(err, l.D.NoRows):
		return backend.Run{}, backend.ErrNotFound
	case err != nil:
		return backend.Run{}, l.D.Err(ctx, err)
	}
	return r, nil
}

// HighWater is the step of backend.Ledger's HighWater
// (guard.Guard.HighWater): the job's high-water mark and the spec version
// stored with it; zero without one.
func (l *Ledger) HighWater(ctx context.Context, job string) (time.Time, string, error) {
	if err := l.Gate.Enter(); err != nil {
		return time.Time{}, "", err
	}
	defer l.Gate.Leave()
	scanInstant := l.D.ScanInstant
	if scanInstant == nil {
		scanInstant = TimeInstant
	}
	dest, high := scanInstant()
	var version string
	err := l.DB.QueryRow(ctx, l.D.Bind(`SELECT `+l.D.HighColumn+`, high_version FROM `+l.Jobs+` WHERE job = ?`), job).
		Scan(dest, &version)
	t, ok := high()
	switch {
	case errors.Is(err, l.D.NoRows) || (err == nil && !ok):
		return time.Time{}, "", nil
	case err != nil:
		return time.Time{}, "", l.D.Err(ctx, err)
	}
	return t, version, nil
}

// ListRuns is the step of backend.Ledger's ListRuns (guard.Guard.ListRuns,
// which makes f's limit explicit): newest ScheduledAt first, then by job;
// runs only, not job metadata (backend.MetaSep).
func (l *Ledger) ListRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	if err := l.Gate.Enter(); err != nil {
		return nil, err
	}
	defer l.Gate.Leave()
	scan, err := l.Reader()
	if err != nil {
		return nil, err
	}
	var where []string
	var args []any
	add := func(cond string, v any) { where, args = append(where, cond), append(args, v) }
	if f.Job != "" {
		add("job = ?", f.Job)
	} else {
		add(fmt.Sprintf(l.D.NotInJob, "?"), backend.MetaSep)
	}
	if f.State != "" {
		add("state = ?", string(f.State))
	}
	if !f.Since.IsZero() { // ScheduledAt >= Since
		add(l.D.AtColumn+" >= ?", l.D.Instant(backend.CeilInstant(f.Since)))
	}
	if !f.Before.IsZero() { // ScheduledAt < Before
		add(l.D.AtColumn+" < ?", l.D.Instant(backend.CeilInstant(f.Before)))
	}
	q := `SELECT ` + l.Cols + ` FROM ` + l.Runs + ` WHERE ` + strings.Join(where, " AND ") +
		fmt.Sprintf(` ORDER BY %s DESC, job LIMIT %d`, l.D.AtColumn, f.Limit)
	rows, err := l.DB.Query(ctx, l.D.Bind(q), args...)
	return collect(ctx, l.D, rows, err, scan)
}

// Prune is the step of backend.Ledger's Prune (guard.Guard.Prune), with
// PruneSQL. Running occurrences, counters and high-water marks are never
// touched.
func (l *Ledger) Prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	n, err := l.Write(ctx, l.D.Bind(l.PruneSQL), l.PruneBefore(olderThan), batch)
	return int(n), err
}

// Heartbeat is the step of backend.Ledger's Heartbeat
// (guard.Guard.Heartbeat) for a dialect that judges expiry by the server's
// clock: the lease is extended to the TTL from now, never shortened.
func (l *Ledger) Heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	return l.guardedRun(ctx, req.Job, req.ScheduledAt, req.Owner, req.Token,
		`UPDATE `+l.Runs+` SET expires_at = GREATEST(expires_at, `+l.D.Later("?")+`) WHERE `+l.D.RunGuard(),
		Micros(req.TTL))
}

// Finish is the step of backend.Ledger's Finish (guard.Guard.Finish, which
// cleans the outcome's texts) for a dialect that judges expiry by the
// server's clock.
func (l *Ledger) Finish(ctx context.Context, req backend.FinishRequest) error {
	out := req.Outcome
	return l.guardedRun(ctx, req.Job, req.ScheduledAt, req.Owner, req.Token,
		`UPDATE `+l.Runs+` SET state = ?, finished_at = `+l.D.Now+`, duration_ns = ?, result = ?, error = ?
		WHERE `+l.D.RunGuard(), string(out.State), int64(out.Duration), out.Result, out.Error)
}

// guardedRun runs a guarded UPDATE of a run (RunGuard); set are the SET
// arguments, which come before the guard's. No row matched: the bare
// backend.ErrLeaseLost.
func (l *Ledger) guardedRun(ctx context.Context, job string, at time.Time, owner backend.Owner, token uint64, q string, set ...any) error {
	args := append(set, l.D.GuardArgs(job, backend.Instant(at), owner, token)...)
	n, err := l.Write(ctx, l.D.Bind(q), args...)
	switch {
	case err != nil:
		return err
	case n == 0:
		return backend.ErrLeaseLost
	}
	return nil
}

// Running counts the job's occurrences other than at's under live leases
// by the server's clock, for MaxRunning; the caller holds the job's lock.
func (l *Ledger) Running(ctx context.Context, q DB, job string, at time.Time) (int, error) {
	var n int
	err := q.QueryRow(ctx, l.D.Bind(`SELECT COUNT(*) FROM `+l.Runs+`
		WHERE job = ? AND scheduled_at <> ? AND state = 'running' AND expires_at > `+l.D.Now), job, at).Scan(&n)
	return n, err
}

// Renew extends the runner's lease of a running occurrence still held by
// req.Owner with token to the TTL from the server's now, never shortening
// it, for a retried Claim or Reclaim answered "yours". It returns the number of
// rows matched (0: the occurrence changed hands or state meanwhile).
func (l *Ledger) Renew(ctx context.Context, q DB, req backend.ClaimRequest, at time.Time, token uint64) (int64, error) {
	return q.Exec(ctx, l.D.Bind(`UPDATE `+l.Runs+` SET expires_at = GREATEST(expires_at, `+l.D.Later("?")+`)
		WHERE job = ? AND scheduled_at = ? AND state = 'running' AND instance = ? AND nonce = ? AND token = ?`),
		Micros(req.TTL), req.Job, at, req.Owner.Instance, req.Owner.Nonce[:], l.D.token(token))
}

// ScanRun reads a run of RunCols, for a dialect that judges expiry by the
// server's clock (its last column is Expired).
func (d *Dialect) ScanRun(s Scanner) (backend.Run, error) {
	var (
		r        backend.Run
		nonce    []byte
		state    string
		finished *time.Time
		dur      int64
	)
	token, scanned := d.tokenScan(&r.Token)
	if err := s.Scan(&r.Job, &r.ScheduledAt, &r.SpecVersion, &r.Owner.Instance, &nonce, token, &r.Attempt,
		&state, &r.ClaimedAt, &finished, &dur, &r.Result, &r.Error, &r.Expired); err != nil {
		return r, err
	}
	if err := SetNonce(&r.Owner.Nonce, nonce); err != nil {
		return r, err
	}
	scanned()
	r.ScheduledAt, r.ClaimedAt = r.ScheduledAt.UTC(), r.ClaimedAt.UTC()
	if finished != nil {
		r.FinishedAt = finished.UTC()
	}
	r.State, r.Duration = backend.RunState(state), time.Duration(dur)
	return r, nil
}
