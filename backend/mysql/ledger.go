package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/backend"
)

const runCols = `job, scheduled_at, spec_version, instance, nonce, token, attempt, state,
	claimed_at, finished_at, duration_ns, result, error, (state = 'running' AND expires_at <= NOW(6))`

func scanRun(s scanner) (backend.Run, error) {
	var (
		r        backend.Run
		nonce    []byte
		state    string
		finished sql.NullTime
		dur      int64
	)
	if err := s.Scan(&r.Job, &r.ScheduledAt, &r.SpecVersion, &r.Owner.Instance, &nonce, &r.Token, &r.Attempt,
		&state, &r.ClaimedAt, &finished, &dur, &r.Result, &r.Error, &r.Expired); err != nil {
		return r, err
	}
	r.ScheduledAt, r.ClaimedAt = r.ScheduledAt.UTC(), r.ClaimedAt.UTC()
	if finished.Valid {
		r.FinishedAt = finished.Time.UTC()
	}
	r.State, r.Duration = backend.RunState(state), time.Duration(dur)
	return r, setNonce(&r.Owner.Nonce, nonce)
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (b *Backend) getRun(ctx context.Context, q queryer, job string, at time.Time, suffix string) (backend.Run, error) {
	return scanRun(q.QueryRowContext(ctx, `SELECT `+runCols+` FROM `+b.tRuns+` WHERE job = ? AND scheduled_at = ?`+suffix, job, at))
}

func occurrence(job string, at time.Time) string {
	return fmt.Sprintf("job %q at %s", job, at.Format(time.RFC3339Nano))
}

// tx runs fn in a READ COMMITTED transaction, retrying deadlocks.
func (b *Backend) tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return retryDeadlock(ctx, func() error {
		tx, err := b.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}

// bumpSQL takes the next token of a job (locking its row, so the claims of
// one job are serialised) and raises the high-water mark. high_version is
// assigned before high_at because ODKU assigns left to right: its IF must
// see the old high_at.
func (b *Backend) bumpSQL() string {
	const higher = `(high_at IS NULL OR VALUES(high_at) > high_at)`
	return `INSERT INTO ` + b.tJobs + ` (job, counter, high_at, high_version) VALUES (?, LAST_INSERT_ID(1), ?, ?)
		ON DUPLICATE KEY UPDATE counter = LAST_INSERT_ID(counter + 1),
			high_version = IF(` + higher + `, VALUES(high_version), high_version),
			high_at = IF(` + higher + `, VALUES(high_at), high_at)`
}

// errLostRace: the run's INSERT hit the primary key (1062).
var errLostRace = errors.New("lost the race")

// Claim implements backend.Ledger: read the occurrence's record (one
// autocommit read: a claim that loses to a committed winner costs one round
// trip); without one, in one READ COMMITTED transaction (claimTx), INSERT
// the run (token 0 for now) unless it is in the future beyond MaxEarly by
// the server's clock; take the job's next token (which locks the job's row,
// so the claims of one job are serialised); set the run's token unless it
// is older than MaxLate by that clock (refused, rolled back); count running
// occurrences when MaxRunning is set. A duplicate-key error on the INSERT
// means another claim won. Inserting first makes a losing claim wait on the
// winner's row and fail without locking the job's row or writing anything
// (it used to bump the counter first, so every concurrent loser queued on
// the job's row for a redo-log flush of its own).
func (b *Backend) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	if err := backend.CheckClaim(req, MinTTL); err != nil {
		return backend.Grant{}, err
	}
	if err := b.enter(); err != nil {
		return backend.Grant{}, err
	}
	defer b.mu.RUnlock()
	at := backend.Instant(req.ScheduledAt)
	what := "claim " + occurrence(req.Job, at)
	ttl := time.Duration(micros(req.TTL)) * time.Microsecond
	var (
		g     backend.Grant
		exist *backend.Run
	)
	// The record first, outside the transaction (a READ COMMITTED read in
	// it would see the same): most claims of an occurrence are losers that
	// find the winner's record, and they are done in one round trip.
	var r backend.Run
	st, err := b.stmt(ctx, `SELECT `+runCols+` FROM `+b.tRuns+` WHERE job = ? AND scheduled_at = ?`)
	if err == nil {
		r, err = scanRun(st.QueryRowContext(ctx, req.Job, at))
	}
	switch {
	case err == nil:
		exist = &r
	case !errors.Is(err, sql.ErrNoRows):
		return backend.Grant{}, dbErr(ctx, what, err)
	default:
		err = b.tx(ctx, func(tx *sql.Tx) error { return b.claimTx(ctx, tx, req, at, ttl, &g) })
	}
	if errors.Is(err, errLostRace) {
		r, gerr := b.getRun(ctx, b.db, req.Job, at, "")
		if gerr != nil {
			return backend.Grant{}, dbErr(ctx, what, gerr)
		}
		exist, err = &r, nil
	}
	switch {
	case errors.Is(err, backend.ErrTooEarly) || errors.Is(err, backend.ErrTooLate) || errors.Is(err, backend.ErrOverlap):
		return backend.Grant{}, err
	case err != nil:
		return backend.Grant{}, dbErr(ctx, what, err)
	case exist != nil && exist.Owner == req.Owner && exist.State == backend.Running: // a retry: renew it
		n, err := b.renewRun(ctx, b.db, req, at, exist.Token)
		switch {
		case err != nil:
			return backend.Grant{}, dbErr(ctx, what, err)
		case n == 0: // taken over or finished meanwhile
			r, err := b.getRun(ctx, b.db, req.Job, at, "")
			if err != nil {
				return backend.Grant{}, dbErr(ctx, what, err)
			}
			return backend.Grant{}, &backend.ClaimedError{Run: r}
		}
		return backend.Grant{Token: exist.Token, TTL: ttl}, nil
	case exist != nil:
		return backend.Grant{}, &backend.ClaimedError{Run: *exist}
	}
	return g, nil
}

// claimTx is Claim's transaction, for an occurrence with no record: INSERT
// the run unless it is in the future beyond MaxEarly; take the job's next
// token; set it on the run unless the occurrence is older than MaxLate —
// both by the server's clock, MaxLate judged once the INSERT holds the key,
// in the same statement as the token (no round trip of its own) and before
// MaxRunning; count running occurrences when MaxRunning is set. Every
// refusal rolls the transaction back.
func (b *Backend) claimTx(ctx context.Context, tx *sql.Tx, req backend.ClaimRequest, at time.Time, ttl time.Duration, g *backend.Grant) error {
	res, err := b.execIn(ctx, tx, `INSERT INTO `+b.tRuns+` (job, scheduled_at, spec_version, instance, nonce, token,
		attempt, state, claimed_at, expires_at, result, error)
		SELECT ?, ?, ?, ?, ?, 0, 1, 'running', NOW(6), NOW(6) + INTERVAL ? MICROSECOND, '', ''
		FROM DUAL WHERE ? <= NOW(6) + INTERVAL ? MICROSECOND`,
		req.Job, at, req.SpecVersion, req.Owner.Instance, req.Owner.Nonce[:], micros(req.TTL), at, micros(req.MaxEarly))
	if isErr(err, errDupEntry) {
		return errLostRace
	}
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		now, err := serverNow(ctx, tx)
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: %s, backend clock %s, max early %v",
			backend.ErrTooEarly, occurrence(req.Job, at), now.UTC().Format(time.RFC3339Nano), req.MaxEarly)
	}
	res, err = b.execIn(ctx, tx, b.bumpSQL(), req.Job, at, req.SpecVersion)
	if err != nil {
		return err
	}
	token, err := res.LastInsertId()
	if err != nil {
		return err
	}
	setToken := `UPDATE ` + b.tRuns + ` SET token = ? WHERE job = ? AND scheduled_at = ?`
	args := []any{token, req.Job, at}
	if req.MaxLate > 0 {
		setToken += ` AND ? >= NOW(6) - INTERVAL ? MICROSECOND`
		args = append(args, at, micros(req.MaxLate))
	}
	res, err = b.execIn(ctx, tx, setToken, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 { // the run is ours (inserted above): only MaxLate can miss
		now, err := serverNow(ctx, tx)
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: %s, backend clock %s, max late %v",
			backend.ErrTooLate, occurrence(req.Job, at), now.UTC().Format(time.RFC3339Nano), req.MaxLate)
	}
	if req.MaxRunning > 0 {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+b.tRuns+`
			WHERE job = ? AND state = 'running' AND expires_at > NOW(6) AND scheduled_at <> ?`, req.Job, at).Scan(&n); err != nil {
			return err
		}
		if n >= req.MaxRunning {
			return fmt.Errorf("%w: job %q has %d running, max %d", backend.ErrOverlap, req.Job, n, req.MaxRunning)
		}
	}
	*g = backend.Grant{Token: uint64(token), TTL: ttl}
	return nil
}

// serverNow reads the server's clock, for an error message.
func serverNow(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (time.Time, error) {
	var now time.Time
	err := q.QueryRowContext(ctx, `SELECT NOW(6)`).Scan(&now)
	return now, err
}

// renewRun extends the runner's lease of a running occurrence still held
// by req.Owner with token to the TTL from now, for a retried Claim or
// Reclaim answered "yours". It returns the number of rows matched (0: the
// occurrence changed hands or state meanwhile).
func (b *Backend) renewRun(ctx context.Context, q execer, req backend.ClaimRequest, at time.Time, token uint64) (int64, error) {
	res, err := q.ExecContext(ctx, `UPDATE `+b.tRuns+` SET expires_at = GREATEST(expires_at, NOW(6) + INTERVAL ? MICROSECOND)
		WHERE job = ? AND scheduled_at = ? AND state = 'running' AND instance = ? AND nonce = ? AND token = ?`,
		micros(req.TTL), req.Job, at, req.Owner.Instance, req.Owner.Nonce[:], token)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// execer is what renewRun needs of a *sql.DB or *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// runGuard: running, held by owner+token, unexpired. Arguments: job,
// scheduled_at, instance, nonce, token.
const runGuard = `job = ? AND scheduled_at = ? AND state = 'running' AND instance = ? AND nonce = ?
	AND token = ? AND expires_at > NOW(6)`

// Heartbeat implements backend.Ledger.
func (b *Backend) Heartbeat(ctx context.Context, job string, at time.Time, owner backend.Owner, token uint64, ttl time.Duration) error {
	if err := backend.CheckHeld(job, at, owner, token); err != nil {
		return err
	}
	if err := backend.CheckTTL(ttl, MinTTL); err != nil {
		return err
	}
	return b.guardedRun(ctx, "heartbeat", job, at, owner, token,
		`UPDATE `+b.tRuns+` SET expires_at = GREATEST(expires_at, NOW(6) + INTERVAL ? MICROSECOND) WHERE `+runGuard, micros(ttl))
}

// Finish implements backend.Ledger.
func (b *Backend) Finish(ctx context.Context, job string, at time.Time, owner backend.Owner, token uint64, out backend.Outcome) error {
	if err := backend.CheckHeld(job, at, owner, token); err != nil {
		return err
	}
	out, err := backend.CheckOutcome(out)
	if err != nil {
		return err
	}
	return b.guardedRun(ctx, "finish", job, at, owner, token,
		`UPDATE `+b.tRuns+` SET state = ?, finished_at = NOW(6), duration_ns = ?, result = ?, error = ? WHERE `+runGuard,
		string(out.State), int64(out.Duration), out.Result, out.Error)
}

// guardedRun runs a guarded UPDATE of a run; set are the SET arguments,
// which come before the guard's.
func (b *Backend) guardedRun(ctx context.Context, op, job string, at time.Time, owner backend.Owner, token uint64, q string, set ...any) error {
	if err := b.enter(); err != nil {
		return err
	}
	defer b.mu.RUnlock()
	at = backend.Instant(at)
	args := append(set, job, at, owner.Instance, owner.Nonce[:], token)
	err := b.guarded(ctx, op+" "+occurrence(job, at), q, args...)
	if errors.Is(err, backend.ErrLeaseLost) {
		return fmt.Errorf("%w: %s, token %d", backend.ErrLeaseLost, occurrence(job, at), token)
	}
	return err
}

// Reclaim implements backend.Ledger (the run's row is locked FOR UPDATE;
// it exists, so the lock is real even at READ COMMITTED).
func (b *Backend) Reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	if err := backend.CheckClaim(req, MinTTL); err != nil {
		return backend.Grant{}, backend.Run{}, err
	}
	if err := b.enter(); err != nil {
		return backend.Grant{}, backend.Run{}, err
	}
	defer b.mu.RUnlock()
	at := backend.Instant(req.ScheduledAt)
	what := "reclaim " + occurrence(req.Job, at)
	ttl := time.Duration(micros(req.TTL)) * time.Microsecond
	var (
		g   backend.Grant
		run backend.Run
	)
	err := b.tx(ctx, func(tx *sql.Tx) error {
		r, err := b.getRun(ctx, tx, req.Job, at, " FOR UPDATE")
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("%w: %s was never claimed", backend.ErrNotFound, occurrence(req.Job, at))
		case err != nil:
			return err
		case r.State == backend.Running && r.Owner == req.Owner: // a retry: renew it
			if _, err := b.renewRun(ctx, tx, req, at, r.Token); err != nil {
				return err
			}
			g, run = backend.Grant{Token: r.Token, TTL: ttl}, r
			return nil
		case r.State.Finished():
			return &backend.ClaimedError{Run: r}
		case !r.Expired:
			return fmt.Errorf("%w: %s held by %s", backend.ErrNotExpired, occurrence(req.Job, at), r.Owner.Instance)
		}
		res, err := tx.ExecContext(ctx, `UPDATE `+b.tJobs+` SET counter = LAST_INSERT_ID(counter + 1) WHERE job = ?`, req.Job)
		if err != nil {
			return err
		}
		token, err := res.LastInsertId()
		if err != nil {
			return err
		}
		if req.MaxRunning > 0 {
			// Counted under the job row's lock (taken by the bump above), as
			// Claim counts: the job's other occurrences under live leases.
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+b.tRuns+`
				WHERE job = ? AND state = 'running' AND expires_at > NOW(6) AND scheduled_at <> ?`, req.Job, at).Scan(&n); err != nil {
				return err
			}
			if n >= req.MaxRunning {
				return fmt.Errorf("%w: %s: the job has %d other running, max %d", backend.ErrOverlap, occurrence(req.Job, at), n, req.MaxRunning)
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+b.tRuns+` SET instance = ?, nonce = ?, token = ?, attempt = attempt + 1,
			spec_version = ?, claimed_at = NOW(6), expires_at = NOW(6) + INTERVAL ? MICROSECOND
			WHERE job = ? AND scheduled_at = ?`,
			req.Owner.Instance, req.Owner.Nonce[:], token, req.SpecVersion, micros(req.TTL), req.Job, at); err != nil {
			return err
		}
		run, err = b.getRun(ctx, tx, req.Job, at, "")
		g = backend.Grant{Token: uint64(token), TTL: ttl}
		return err
	})
	if err != nil {
		var ce *backend.ClaimedError
		if errors.As(err, &ce) || errors.Is(err, backend.ErrNotFound) || errors.Is(err, backend.ErrNotExpired) || errors.Is(err, backend.ErrOverlap) {
			return backend.Grant{}, backend.Run{}, err
		}
		return backend.Grant{}, backend.Run{}, dbErr(ctx, what, err)
	}
	return g, run, nil
}

// Abandon implements backend.Ledger.
func (b *Backend) Abandon(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	if err := backend.CheckKey("job", job); err != nil {
		return backend.Run{}, err
	}
	if err := backend.CheckInstant(at); err != nil {
		return backend.Run{}, err
	}
	if err := b.enter(); err != nil {
		return backend.Run{}, err
	}
	defer b.mu.RUnlock()
	at = backend.Instant(at)
	what := "abandon " + occurrence(job, at)
	var n int64
	err := retryDeadlock(ctx, func() error {
		res, err := b.db.ExecContext(ctx, `UPDATE `+b.tRuns+` SET state = 'abandoned', finished_at = NOW(6)
			WHERE job = ? AND scheduled_at = ? AND state = 'running' AND expires_at <= NOW(6)`, job, at)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return backend.Run{}, dbErr(ctx, what, err)
	}
	r, err := b.getRun(ctx, b.db, job, at, "")
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return backend.Run{}, fmt.Errorf("%w: %s was never claimed", backend.ErrNotFound, occurrence(job, at))
	case err != nil:
		return backend.Run{}, dbErr(ctx, what, err)
	case n == 1:
		return r, nil
	case r.State.Finished():
		return backend.Run{}, &backend.ClaimedError{Run: r}
	}
	return backend.Run{}, fmt.Errorf("%w: %s held by %s", backend.ErrNotExpired, occurrence(job, at), r.Owner.Instance)
}

// GetRun implements backend.Ledger.
func (b *Backend) GetRun(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	if err := backend.CheckKey("job", job); err != nil {
		return backend.Run{}, err
	}
	if err := b.enter(); err != nil {
		return backend.Run{}, err
	}
	defer b.mu.RUnlock()
	at = backend.Instant(at)
	r, err := b.getRun(ctx, b.db, job, at, "")
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return backend.Run{}, fmt.Errorf("%w: %s", backend.ErrNotFound, occurrence(job, at))
	case err != nil:
		return backend.Run{}, dbErr(ctx, "get run "+occurrence(job, at), err)
	}
	return r, nil
}

// HighWater implements backend.Ledger.
func (b *Backend) HighWater(ctx context.Context, job string) (time.Time, string, error) {
	if err := backend.CheckKey("job", job); err != nil {
		return time.Time{}, "", err
	}
	if err := b.enter(); err != nil {
		return time.Time{}, "", err
	}
	defer b.mu.RUnlock()
	var high sql.NullTime
	var version string
	err := b.db.QueryRowContext(ctx, `SELECT high_at, high_version FROM `+b.tJobs+` WHERE job = ?`, job).Scan(&high, &version)
	switch {
	case errors.Is(err, sql.ErrNoRows) || (err == nil && !high.Valid):
		return time.Time{}, "", nil
	case err != nil:
		return time.Time{}, "", dbErr(ctx, fmt.Sprintf("high-water mark of job %q", job), err)
	}
	return high.Time.UTC(), version, nil
}

// ListRuns implements backend.Ledger: newest ScheduledAt first, then job.
func (b *Backend) ListRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	if err := b.enter(); err != nil {
		return nil, err
	}
	defer b.mu.RUnlock()
	var where []string
	var args []any
	if f.Job != "" {
		where, args = append(where, "job = ?"), append(args, f.Job)
	} else { // runs only, not job metadata (backend.MetaSep)
		where, args = append(where, "LOCATE(?, job) = 0"), append(args, backend.MetaSep)
	}
	if f.State != "" {
		where, args = append(where, "state = ?"), append(args, string(f.State))
	}
	if !f.Since.IsZero() {
		where, args = append(where, "scheduled_at >= ?"), append(args, ceilMs(f.Since))
	}
	if !f.Before.IsZero() {
		where, args = append(where, "scheduled_at < ?"), append(args, ceilMs(f.Before))
	}
	q := `SELECT ` + runCols + ` FROM ` + b.tRuns
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	limit := f.EffectiveLimit()
	q += fmt.Sprintf(` ORDER BY scheduled_at DESC, job LIMIT %d`, limit)
	rows, err := b.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, dbErr(ctx, "list runs", err)
	}
	defer rows.Close()
	var out []backend.Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, dbErr(ctx, "list runs", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(ctx, "list runs", err)
	}
	return out, nil
}

// Prune implements backend.Ledger: one DELETE … ORDER BY finished_at
// LIMIT batch through the finished_at index. Running occurrences (whose
// finished_at is NULL), counters and high-water marks are never touched.
func (b *Backend) Prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	if err := backend.CheckPrune(olderThan, batch); err != nil {
		return 0, err
	}
	if err := b.enter(); err != nil {
		return 0, err
	}
	defer b.mu.RUnlock()
	var n int64
	err := retryDeadlock(ctx, func() error {
		res, err := b.db.ExecContext(ctx, `DELETE FROM `+b.tRuns+`
			WHERE finished_at < ? AND state <> 'running' ORDER BY finished_at LIMIT ?`, olderThan.UTC(), batch)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, dbErr(ctx, "prune runs", err)
	}
	return int(n), nil
}
