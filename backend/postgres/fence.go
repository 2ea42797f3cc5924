package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/backend"
)

// Fence makes the caller's transaction tx a fenced write: it checks, by the
// server's clock, that token still holds the unexpired lease on key (the
// backend key, e.g. leasehold.LockKey(namespace, key)), and locks the lease
// row FOR SHARE until tx ends. A new holder's Acquire must update that row,
// so it waits until tx commits or rolls back: no new grant can commit
// between the check and the caller's write. (A plain subquery in the write
// races under READ COMMITTED: the new grant can commit in between.) The
// transaction may sit idle only until the lease expires (Fence sets
// idle_in_transaction_session_timeout for it): a holder that stalls inside
// it (a stopped process, a long pause) has its session ended by the
// server, its write is not committed, and the next holder gets in.
//
// Call it first in the transaction, then write, then commit; on ErrLeaseFenced,
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
		`SELECT `+idleUntilExpiry+` FROM `+b.tLeases+` WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp() FOR SHARE`,
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
		`SELECT `+idleUntilExpiry+` FROM `+b.tRuns+` WHERE job = $1 AND scheduled_at = $2 AND token = $3
			AND state = 'running' AND expires_at > clock_timestamp() FOR SHARE`,
		job, at, int64(token))
}

// idleUntilExpiry, selected from the fenced row, limits how long the
// fenced transaction may sit idle to what is left of the row's lease (at
// least 1 ms; 0 would turn the limit off): past it the server ends the
// session, rolling the transaction back and unlocking the row. Set LOCAL,
// it ends with the transaction.
const idleUntilExpiry = `set_config('idle_in_transaction_session_timeout',
	GREATEST(1, ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000))::bigint::text, true)`

func (b *Backend) fence(ctx context.Context, tx pgx.Tx, what, q string, args ...any) error {
	if tx == nil {
		return fmt.Errorf("%w: fence %s: transaction is nil", backend.ErrInvalid, what)
	}
	var limit string
	err := tx.QueryRow(ctx, q, args...).Scan(&limit)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %s", ErrLeaseFenced, what)
	case err != nil:
		return dbErr(ctx, "fence "+what, err)
	}
	return nil
}
