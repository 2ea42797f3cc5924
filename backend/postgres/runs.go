package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/backend"
)

// Reclaim implements backend.Ledger, in a transaction that locks the run's
// row (FOR UPDATE) and then the job's counter row.
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
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return backend.Grant{}, backend.Run{}, dbErr(ctx, what, err)
	}
	defer tx.Rollback(ctx)
	r, err := b.getRun(ctx, tx, req.Job, at, " FOR UPDATE")
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: %s was never claimed", backend.ErrNotFound, occurrence(req.Job, at))
	case err != nil:
		return backend.Grant{}, backend.Run{}, dbErr(ctx, what, err)
	case r.State == backend.Running && r.Owner == req.Owner: // a retry: renew it
		if _, err := b.renewRun(ctx, tx, req, at, r.Token); err != nil {
			return backend.Grant{}, backend.Run{}, dbErr(ctx, what, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return backend.Grant{}, backend.Run{}, dbErr(ctx, what, err)
		}
		return backend.Grant{Token: r.Token, TTL: ttl}, r, nil
	case r.State.Finished():
		return backend.Grant{}, backend.Run{}, &backend.ClaimedError{Run: r}
	case !r.Expired:
		return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: %s held by %s", backend.ErrNotExpired, occurrence(req.Job, at), r.Owner.Instance)
	}
	if req.MaxRunning > 0 {
		// Lock the job's row first, as a limited Claim does, so that the
		// two cannot both see room; then count the job's other occurrences
		// under live leases — in a statement of its own, whose snapshot
		// (READ COMMITTED) is taken after the lock was granted and so sees
		// the claim that held it.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM `+b.tJobs+` WHERE job = $1 FOR UPDATE`, req.Job); err != nil {
			return backend.Grant{}, backend.Run{}, dbErr(ctx, what, err)
		}
		var running int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+b.tRuns+`
			WHERE job = $1 AND scheduled_at <> $2 AND state = 'running' AND expires_at > clock_timestamp()`, req.Job, at).Scan(&running); err != nil {
			return backend.Grant{}, backend.Run{}, dbErr(ctx, what, err)
		}
		if running >= req.MaxRunning {
			return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: %s: the job has %d other running, max %d", backend.ErrOverlap, occurrence(req.Job, at), running, req.MaxRunning)
		}
	}
	r, err = scanRun(tx.QueryRow(ctx, `WITH j AS (
			UPDATE `+b.tJobs+` SET counter = counter + 1 WHERE job = $1 RETURNING counter
		)
		UPDATE `+b.tRuns+` SET instance = $3, nonce = $4, token = j.counter, attempt = attempt + 1,
			spec_version = $5, claimed_at = clock_timestamp(), expires_at = clock_timestamp() + $6 * interval '1 microsecond'
		FROM j WHERE job = $1 AND scheduled_at = $2
		RETURNING `+runCols,
		req.Job, at, req.Owner.Instance, req.Owner.Nonce[:], req.SpecVersion, micros(req.TTL)))
	if err != nil {
		return backend.Grant{}, backend.Run{}, dbErr(ctx, what, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return backend.Grant{}, backend.Run{}, dbErr(ctx, what, err)
	}
	return backend.Grant{Token: r.Token, TTL: ttl}, r, nil
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
	r, err := scanRun(b.pool.QueryRow(ctx, `UPDATE `+b.tRuns+` SET state = 'abandoned', finished_at = clock_timestamp()
		WHERE job = $1 AND scheduled_at = $2 AND state = 'running' AND expires_at <= clock_timestamp()
		RETURNING `+runCols, job, at))
	switch {
	case err == nil:
		return r, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return backend.Run{}, dbErr(ctx, what, err)
	}
	// Not abandoned: say why.
	r, err = b.getRun(ctx, b.pool, job, at, "")
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return backend.Run{}, fmt.Errorf("%w: %s was never claimed", backend.ErrNotFound, occurrence(job, at))
	case err != nil:
		return backend.Run{}, dbErr(ctx, what, err)
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
	r, err := b.getRun(ctx, b.pool, job, at, "")
	switch {
	case errors.Is(err, pgx.ErrNoRows):
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
	var high *time.Time
	var version string
	err := b.pool.QueryRow(ctx, `SELECT high_at, high_version FROM `+b.tJobs+` WHERE job = $1`, job).Scan(&high, &version)
	switch {
	case errors.Is(err, pgx.ErrNoRows) || (err == nil && high == nil):
		return time.Time{}, "", nil
	case err != nil:
		return time.Time{}, "", dbErr(ctx, fmt.Sprintf("high-water mark of job %q", job), err)
	}
	return high.UTC(), version, nil
}

// ListRuns implements backend.Ledger: newest ScheduledAt first, then by job.
func (b *Backend) ListRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	if err := b.enter(); err != nil {
		return nil, err
	}
	defer b.mu.RUnlock()
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.Job != "" {
		add("job = $%d", f.Job)
	} else { // runs only, not job metadata (backend.MetaSep)
		add("strpos(job, $%d) = 0", backend.MetaSep)
	}
	if f.State != "" {
		add("state = $%d", string(f.State))
	}
	if !f.Since.IsZero() {
		add("scheduled_at >= $%d", ceilMs(f.Since))
	}
	if !f.Before.IsZero() {
		add("scheduled_at < $%d", ceilMs(f.Before))
	}
	q := `SELECT ` + runCols + ` FROM ` + b.tRuns
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	limit := f.EffectiveLimit()
	q += fmt.Sprintf(` ORDER BY scheduled_at DESC, job LIMIT %d`, limit)
	rows, err := b.pool.Query(ctx, q, args...)
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

// Prune implements backend.Ledger: one DELETE of at most batch finished
// runs whose FinishedAt is before olderThan, found through the partial
// index on finished_at. Rows another Prune is deleting are skipped (SKIP
// LOCKED), so concurrent pruners do not queue behind each other. Running
// occurrences, counters and high-water marks are never touched.
func (b *Backend) Prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	if err := backend.CheckPrune(olderThan, batch); err != nil {
		return 0, err
	}
	if err := b.enter(); err != nil {
		return 0, err
	}
	defer b.mu.RUnlock()
	tag, err := b.pool.Exec(ctx, `DELETE FROM `+b.tRuns+` r USING (
			SELECT job, scheduled_at FROM `+b.tRuns+`
			WHERE finished_at < $1 AND state <> 'running'
			ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED
		) d WHERE r.job = d.job AND r.scheduled_at = d.scheduled_at`, ceilMicro(olderThan), batch)
	if err != nil {
		return 0, dbErr(ctx, "prune runs", err)
	}
	return int(tag.RowsAffected()), nil
}

// ceilMicro rounds t up to the microsecond, PostgreSQL's resolution, so
// that "stored < ceilMicro(t)" equals "stored < t".
func ceilMicro(t time.Time) time.Time {
	if r := t.Truncate(time.Microsecond); !r.Equal(t) {
		return r.Add(time.Microsecond)
	}
	return t
}
