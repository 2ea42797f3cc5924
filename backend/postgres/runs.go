package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/sqlledger"
)

// Reclaim implements backend.Ledger, in a transaction that locks the run's
// row (FOR UPDATE) and then the job's counter row.
func (b *Backend) Reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	return b.g.Reclaim(ctx, req, b.reclaim)
}

func (b *Backend) reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	if err := b.gate.Enter(); err != nil {
		return backend.Grant{}, backend.Run{}, err
	}
	defer b.gate.Leave()
	at := backend.Instant(req.ScheduledAt)
	ttl := sqlledger.MicrosTTL(req.TTL)
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return backend.Grant{}, backend.Run{}, stepErr(ctx, err)
	}
	defer tx.Rollback(ctx)
	r, err := b.getRun(ctx, tx, req.Job, at, " FOR UPDATE")
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return backend.Grant{}, backend.Run{}, sqlledger.NeverClaimed(req.Job, at)
	case err != nil:
		return backend.Grant{}, backend.Run{}, stepErr(ctx, err)
	}
	if renew, err := sqlledger.Reclaim(req, at, r, !r.Expired); err != nil {
		return backend.Grant{}, backend.Run{}, err
	} else if renew { // a retry
		if _, err := b.led.Renew(ctx, pgxDB{tx}, req, at, r.Token); err != nil {
			return backend.Grant{}, backend.Run{}, stepErr(ctx, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return backend.Grant{}, backend.Run{}, stepErr(ctx, err)
		}
		return backend.Grant{Token: r.Token, TTL: ttl}, r, nil
	}
	if req.MaxRunning > 0 {
		// Lock the job's row first, as a limited Claim does, so that the
		// two cannot both see room; then count the job's other occurrences
		// under live leases — in a statement of its own, whose snapshot
		// (READ COMMITTED) is taken after the lock was granted and so sees
		// the claim that held it.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM `+b.tJobs+` WHERE job = $1 FOR UPDATE`, req.Job); err != nil {
			return backend.Grant{}, backend.Run{}, stepErr(ctx, err)
		}
		running, err := b.led.Running(ctx, pgxDB{tx}, req.Job, at)
		if err != nil {
			return backend.Grant{}, backend.Run{}, stepErr(ctx, err)
		}
		if running >= req.MaxRunning {
			return backend.Grant{}, backend.Run{}, sqlledger.OverlapOther(req, at, running)
		}
	}
	r, err = b.led.D.ScanRun(tx.QueryRow(ctx, `WITH j AS (
			UPDATE `+b.tJobs+` SET counter = counter + 1 WHERE job = $1 RETURNING counter
		)
		UPDATE `+b.tRuns+` SET instance = $3, nonce = $4, token = j.counter, attempt = attempt + 1,
			spec_version = $5, claimed_at = clock_timestamp(), expires_at = clock_timestamp() + $6 * interval '1 microsecond'
		FROM j WHERE job = $1 AND scheduled_at = $2
		RETURNING `+b.led.Cols,
		req.Job, at, req.Owner.Instance, req.Owner.Nonce[:], req.SpecVersion, sqlledger.Micros(req.TTL)))
	if err != nil {
		return backend.Grant{}, backend.Run{}, stepErr(ctx, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return backend.Grant{}, backend.Run{}, stepErr(ctx, err)
	}
	return backend.Grant{Token: r.Token, TTL: ttl}, r, nil
}

// Abandon implements backend.Ledger.
func (b *Backend) Abandon(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	return b.g.Abandon(ctx, job, at, b.abandon)
}

func (b *Backend) abandon(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	if err := b.gate.Enter(); err != nil {
		return backend.Run{}, err
	}
	defer b.gate.Leave()
	at = backend.Instant(at)
	r, err := b.led.D.ScanRun(b.pool.QueryRow(ctx, `UPDATE `+b.tRuns+` SET state = 'abandoned', finished_at = clock_timestamp()
		WHERE job = $1 AND scheduled_at = $2 AND state = 'running' AND expires_at <= clock_timestamp()
		RETURNING `+b.led.Cols, job, at))
	switch {
	case err == nil:
		return r, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return backend.Run{}, stepErr(ctx, err)
	}
	// Not abandoned: say why.
	r, err = b.getRun(ctx, b.pool, job, at, "")
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return backend.Run{}, sqlledger.NeverClaimed(job, at)
	case err != nil:
		return backend.Run{}, stepErr(ctx, err)
	}
	// The UPDATE's guard failed: it is finished or its lease is live.
	return backend.Run{}, sqlledger.Abandon(job, at, r, true)
}

// GetRun implements backend.Ledger (sqlledger).
func (b *Backend) GetRun(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	return b.g.GetRun(ctx, job, at, b.led.GetRun)
}

// HighWater implements backend.Ledger (sqlledger).
func (b *Backend) HighWater(ctx context.Context, job string) (time.Time, string, error) {
	return b.g.HighWater(ctx, job, b.led.HighWater)
}

// ListRuns implements backend.Ledger (sqlledger): newest ScheduledAt
// first, then by job.
func (b *Backend) ListRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	return b.g.ListRuns(ctx, f, b.led.ListRuns)
}

// Prune implements backend.Ledger (sqlledger, with newLedger's PruneSQL:
// one DELETE of at most batch finished runs whose FinishedAt is before
// olderThan, FOR UPDATE SKIP LOCKED). Running occurrences, counters and
// high-water marks are never touched.
func (b *Backend) Prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	return b.g.Prune(ctx, olderThan, batch, b.led.Prune)
}
