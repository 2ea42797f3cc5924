package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/backend"
)

// ErrFenced: Fence or FenceRun found that the token no longer holds the
// lease or the occurrence; the caller must roll its transaction back.
// It wraps backend.ErrLeaseLost.
var ErrFenced = fmt.Errorf("postgres: fenced out: %w", backend.ErrLeaseLost)

// Fence makes the caller's transaction tx a fenced write: it checks, by the
// server's clock, that token still holds the unexpired lease on key (the
// backend key, e.g. leasehold.LockKey(namespace, key)), and locks the lease
// row FOR SHARE until tx ends. A new holder's Acquire must update that row,
// so it waits until tx commits or rolls back: no new grant can commit
// between the check and the caller's write. (A plain subquery in the write
// races under READ COMMITTED: the new grant can commit in between.)
//
// Call it first in the transaction, then write, then commit; on ErrFenced,
// roll back. The token identifies the grant (tokens are unique per key), so
// no owner is needed. tx must be a transaction on the same database (any
// connection, including one from another pool). Keep fenced transactions
// short: while one is open the holder's own Renew of the lease waits too.
func (b *Backend) Fence(ctx context.Context, tx pgx.Tx, key string, token uint64) error {
	if err := backend.CheckKey("key", key); err != nil {
		return err
	}
	if err := backend.CheckToken(token); err != nil {
		return err
	}
	return b.fence(ctx, tx, fmt.Sprintf("key %q, token %d", key, token),
		`SELECT 1 FROM `+b.tLeases+` WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp() FOR SHARE`,
		key, int64(token))
}

// FenceRun is Fence for a scheduled job's occurrence: it checks that token
// still holds the running occurrence (job, scheduledAt) unexpired, and locks
// its row FOR SHARE until tx ends, so a Reclaim, Abandon or Finish cannot
// commit in between.
func (b *Backend) FenceRun(ctx context.Context, tx pgx.Tx, job string, scheduledAt time.Time, token uint64) error {
	if err := backend.CheckKey("job", job); err != nil {
		return err
	}
	if err := backend.CheckInstant(scheduledAt); err != nil {
		return err
	}
	if err := backend.CheckToken(token); err != nil {
		return err
	}
	at := backend.Instant(scheduledAt)
	return b.fence(ctx, tx, fmt.Sprintf("%s, token %d", occurrence(job, at), token),
		`SELECT 1 FROM `+b.tRuns+` WHERE job = $1 AND scheduled_at = $2 AND token = $3
			AND state = 'running' AND expires_at > clock_timestamp() FOR SHARE`,
		job, at, int64(token))
}

func (b *Backend) fence(ctx context.Context, tx pgx.Tx, what, q string, args ...any) error {
	if tx == nil {
		return fmt.Errorf("%w: fence %s: transaction is nil", backend.ErrInvalid, what)
	}
	var one int
	err := tx.QueryRow(ctx, q, args...).Scan(&one)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %s", ErrFenced, what)
	case err != nil:
		return dbErr(ctx, "fence "+what, err)
	}
	return nil
}
