package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/sqlledger"
)

// acquireSQL grants the lease in one statement. The upsert's WHERE lets the
// update happen only when the key is free (expires_at NULL), expired by
// clock_timestamp(), or held by the same owner (a retry, answered with the
// same token and renewed to the TTL from now, never shortened: VALUES is
// evaluated before a row-lock wait, so a retry that waited must not move
// back the expiry a later Renew set). When it did not happen, the second branch reports the
// holder, if the statement's snapshot sees the row (a row committed after
// the snapshot was taken is read again by a second statement).
func (b *Backend) acquireSQL() string {
	return `WITH g AS (
		INSERT INTO ` + b.tLeases + ` AS l (key, instance, nonce, token, expires_at)
		VALUES ($1, $2, $3, 1, clock_timestamp() + $4 * interval '1 microsecond')
		ON CONFLICT (key) DO UPDATE SET
			token = CASE WHEN l.expires_at > clock_timestamp() THEN l.token ELSE l.token + 1 END,
			expires_at = CASE WHEN l.expires_at > clock_timestamp() THEN GREATEST(l.expires_at, excluded.expires_at) ELSE excluded.expires_at END,
			instance = excluded.instance, nonce = excluded.nonce
		WHERE l.expires_at IS NULL OR l.expires_at <= clock_timestamp()
			OR (l.nonce = excluded.nonce AND l.instance = excluded.instance)
		RETURNING token
	)
	SELECT true, token, NULL::text, NULL::bytea, 0::bigint FROM g
	UNION ALL
	SELECT false, token, instance, nonce, COALESCE(` + remainingUS + `, 0) FROM ` + b.tLeases + `
		WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM g)`
}

// newLeases returns the shared lease layer over b's leases table, with
// what is PostgreSQL's own: Release's NOTIFY (release), the key-range
// condition of List, and Get's locking re-read. (Acquire's statement is
// acquire.)
func newLeases(b *Backend) *sqlledger.Leases {
	ls := b.led.ServerLeases(b.tLeases)
	ls.Clear = b.release
	// starts_with decides; key < prefixEnd bounds the key range above
	// when prefixEnd is cheap to form.
	ls.Prefix = func(prefix string) (string, []any) {
		if end, ok := prefixEnd(prefix); ok {
			return `starts_with(key, ?) AND key < ?`, []any{prefix, end}
		}
		return `starts_with(key, ?)`, []any{prefix}
	}
	// The row is read again FOR SHARE, with the expiry judged outside the
	// locking scan: its WHERE would drop the old row version before
	// waiting for the lock. A role that may not lock rows (read-only, a
	// standby) keeps the plain answer.
	ls.Relock = `WITH r AS MATERIALIZED (
			SELECT key, instance, nonce, token, expires_at FROM ` + b.tLeases + ` WHERE key = $1 FOR SHARE
		) SELECT ` + ls.Cols + ` FROM r WHERE ` + ls.D.LeaseLive()
	ls.CannotLock = func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && (pe.Code == "42501" || pe.Code == "25006") // insufficient_privilege, read_only_sql_transaction
	}
	return ls
}

// acquire is Acquire's step in one statement (two when the key is held and
// the holder's row is newer than the statement's snapshot).
func (b *Backend) acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	if err := b.gate.Enter(); err != nil {
		return backend.Grant{}, err
	}
	defer b.gate.Leave()
	us := sqlledger.Micros(ttl)
	granted := time.Duration(us) * time.Microsecond
	for attempt := 0; ; attempt++ {
		var (
			ok       bool
			token    int64
			instance *string
			nonce    []byte
			remUS    int64
		)
		err := b.pool.QueryRow(ctx, b.acquireSQL(), key, owner.Instance, owner.Nonce[:], us).
			Scan(&ok, &token, &instance, &nonce, &remUS)
		switch {
		case err == nil && ok:
			return backend.Grant{Token: uint64(token), TTL: granted}, nil
		case err == nil && instance != nil && remUS > 0:
			h := backend.Lease{Key: key, Token: uint64(token), Remaining: time.Duration(remUS) * time.Microsecond}
			h.Owner.Instance = *instance
			if err := sqlledger.SetNonce(&h.Owner.Nonce, nonce); err != nil {
				return backend.Grant{}, stepErr(ctx, err)
			}
			return backend.Grant{}, &backend.HeldError{Holder: h}
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			return backend.Grant{}, stepErr(ctx, err)
		}
		// Not granted, and the holder was not visible (or has expired or
		// been released since): read it again, then try again.
		l, gerr := b.leases.Read(ctx, key)
		switch {
		case gerr == nil && l.Owner == owner:
			continue // an earlier attempt of ours landed meanwhile: the retry renews it
		case gerr == nil:
			return backend.Grant{}, &backend.HeldError{Holder: l}
		case !errors.Is(gerr, backend.ErrNotFound):
			return backend.Grant{}, gerr
		}
		if attempt == 10 {
			return backend.Grant{}, fmt.Errorf("no answer after %d attempts under contention", attempt+1)
		}
	}
}

// releaseSQL clears the holder, keeps the row (the key's token counter) and
// sends NOTIFY only when a waiter registered on the row (wake_until, set by
// Wait) is still interested: a transaction that notifies takes PostgreSQL's
// global notify-queue lock across its commit, which serialises every
// notifying commit on one WAL flush each. The first column counts the
// released rows, the second the notifications sent.
func (b *Backend) releaseSQL() string {
	return b.led.D.Bind(`WITH r AS (
			UPDATE ` + b.tLeases + ` SET expires_at = NULL WHERE ` + b.led.D.LeaseGuard() + ` RETURNING key, wake_until
		) SELECT (SELECT count(*) FROM r),
			(SELECT count(pg_notify(?, key)) FROM r WHERE wake_until > clock_timestamp())`)
}

// release is Release's step, its guarded write (sqlledger.Leases.Clear): it
// clears the holder and notifies waiters, if any, in one statement.
func (b *Backend) release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	if err := b.gate.Enter(); err != nil {
		return err
	}
	defer b.gate.Leave()
	var n, notified int
	err := b.pool.QueryRow(ctx, b.releaseSQL(), append(b.led.D.LeaseGuardArgs(key, owner, token), b.channel)...).Scan(&n, &notified)
	switch {
	case err != nil:
		return stepErr(ctx, err)
	case n == 0:
		return backend.ErrLeaseLost
	}
	return nil
}

// Acquire implements backend.Leases (acquire).
func (b *Backend) Acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	return b.g.Acquire(ctx, key, owner, ttl, b.acquire)
}

// Renew implements backend.Leases (sqlledger: a guarded UPDATE).
func (b *Backend) Renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	return b.g.Renew(ctx, req, b.leases.Renew)
}

// Release implements backend.Leases (release): it clears
// the holder, keeps the row (the key's token counter) and notifies
// waiters, if any, in one statement.
func (b *Backend) Release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	return b.g.Release(ctx, key, owner, token, b.release)
}

// Get implements backend.Leases (sqlledger, with newLeases' locking
// re-read).
func (b *Backend) Get(ctx context.Context, key string) (backend.Lease, error) {
	return b.g.Get(ctx, key, b.leases.Get)
}

// List implements backend.Leases (sqlledger): the unexpired leases whose
// keys start with prefix (byte-wise), in key order.
func (b *Backend) List(ctx context.Context, prefix string, limit int) ([]backend.Lease, error) {
	return b.g.List(ctx, prefix, limit, b.leases.List)
}

// prefixEnd returns the least string greater than every string that starts
// with p, or false when it is not cheap to form one as valid UTF-8 (the
// last byte is not ASCII); the query then relies on starts_with alone.
func prefixEnd(p string) (string, bool) {
	if p == "" {
		return "", false
	}
	bs := []byte(p)
	last := bs[len(bs)-1]
	if last >= 0x7f { // incrementing would not be valid UTF-8
		return "", false
	}
	bs[len(bs)-1] = last + 1
	return string(bs), true
}
