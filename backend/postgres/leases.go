package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/sqlledger"
)

// remainingUS is the SQL for the lease's remaining time in microseconds.
const remainingUS = `(extract(epoch FROM (expires_at - clock_timestamp())) * 1000000)::bigint`

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

// Acquire implements backend.Leases in one statement (two when the key is
// held and the holder's row is newer than the statement's snapshot).
func (b *Backend) Acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	if err := backend.CheckLease(key, owner, ttl, MinTTL); err != nil {
		return backend.Grant{}, err
	}
	if err := b.gate.Enter(); err != nil {
		return backend.Grant{}, err
	}
	defer b.gate.Leave()
	what := fmt.Sprintf("acquire key %q", key)
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
				return backend.Grant{}, dbErr(ctx, what, err)
			}
			return backend.Grant{}, &backend.HeldError{Holder: h}
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			return backend.Grant{}, dbErr(ctx, what, err)
		}
		// Not granted, and the holder was not visible (or has expired or
		// been released since): read it again, then try again.
		l, gerr := b.get(ctx, key)
		switch {
		case gerr == nil && l.Owner == owner:
			continue // an earlier attempt of ours landed meanwhile: the retry renews it
		case gerr == nil:
			return backend.Grant{}, &backend.HeldError{Holder: l}
		case !errors.Is(gerr, backend.ErrNotFound):
			return backend.Grant{}, gerr
		}
		if attempt == 10 {
			return backend.Grant{}, fmt.Errorf("postgres: %s: no answer after %d attempts under contention", what, attempt+1)
		}
	}
}

// leaseGuard is the WHERE clause of Renew and Release: the lease is held by
// owner+token and unexpired by the server's clock. Arguments $1..$4: key,
// instance, nonce, token.
const leaseGuard = `key = $1 AND instance = $2 AND nonce = $3 AND token = $4 AND expires_at > clock_timestamp()`

// Renew implements backend.Leases.
func (b *Backend) Renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	if err := backend.CheckRenew(req, MinTTL); err != nil {
		return backend.Grant{}, err
	}
	key, owner, token, ttl := req.Key, req.Owner, req.Token, req.TTL
	if err := b.gate.Enter(); err != nil {
		return backend.Grant{}, err
	}
	defer b.gate.Leave()
	us := sqlledger.Micros(ttl)
	tag, err := b.pool.Exec(ctx, `UPDATE `+b.tLeases+` SET expires_at = GREATEST(expires_at, clock_timestamp() + $5 * interval '1 microsecond')
		WHERE `+leaseGuard, key, owner.Instance, owner.Nonce[:], int64(token), us)
	if err != nil {
		return backend.Grant{}, dbErr(ctx, fmt.Sprintf("renew key %q", key), err)
	}
	if tag.RowsAffected() == 0 {
		return backend.Grant{}, fmt.Errorf("%w: key %q, token %d", backend.ErrLeaseLost, key, token)
	}
	return backend.Grant{Token: token, TTL: time.Duration(us) * time.Microsecond}, nil
}

// releaseSQL clears the holder, keeps the row (the key's token counter) and
// sends NOTIFY only when a waiter registered on the row (wake_until, set by
// Wait) is still interested: a transaction that notifies takes PostgreSQL's
// global notify-queue lock across its commit, which serialises every
// notifying commit on one WAL flush each. The first column counts the
// released rows, the second the notifications sent.
func (b *Backend) releaseSQL() string {
	return `WITH r AS (
			UPDATE ` + b.tLeases + ` SET expires_at = NULL WHERE ` + leaseGuard + ` RETURNING key, wake_until
		) SELECT (SELECT count(*) FROM r),
			(SELECT count(pg_notify($5, key)) FROM r WHERE wake_until > clock_timestamp())`
}

// Release implements backend.Leases: it clears the holder, keeps the row
// (the key's token counter) and notifies waiters, if any, in one statement.
func (b *Backend) Release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	if err := backend.CheckRelease(key, owner, token); err != nil {
		return err
	}
	if err := b.gate.Enter(); err != nil {
		return err
	}
	defer b.gate.Leave()
	var n, notified int
	err := b.pool.QueryRow(ctx, b.releaseSQL(), key, owner.Instance, owner.Nonce[:], int64(token), b.channel).Scan(&n, &notified)
	if err != nil {
		return dbErr(ctx, fmt.Sprintf("release key %q", key), err)
	}
	if n == 0 {
		return fmt.Errorf("%w: key %q, token %d", backend.ErrLeaseLost, key, token)
	}
	return nil
}

// Get implements backend.Leases.
func (b *Backend) Get(ctx context.Context, key string) (backend.Lease, error) {
	if err := backend.CheckKey("key", key); err != nil {
		return backend.Lease{}, err
	}
	if err := b.gate.Enter(); err != nil {
		return backend.Lease{}, err
	}
	defer b.gate.Leave()
	return b.get(ctx, key)
}

const leaseCols = `key, instance, nonce, token, ` + remainingUS

func scanLease(row pgx.Row) (backend.Lease, error) {
	var (
		l     backend.Lease
		nonce []byte
		token int64
		remUS int64
	)
	if err := row.Scan(&l.Key, &l.Owner.Instance, &nonce, &token, &remUS); err != nil {
		return l, err
	}
	if err := sqlledger.SetNonce(&l.Owner.Nonce, nonce); err != nil {
		return l, err
	}
	l.Token, l.Remaining = uint64(token), time.Duration(remUS)*time.Microsecond
	return l, nil
}

// get reads the key's unexpired lease. A plain read first; if it finds
// none, the row is read again FOR SHARE, with expiry judged after the
// lock: a Renew (or Release) judges expiry when its UPDATE reaches the row,
// but its effect is visible only at its commit, so a snapshot read in
// between answered NotFound for a lease the renewal then kept (a lease read
// as expired came back: TestGetDoesNotSeeExpiryARenewCovers). Waiting for
// the row's writer orders the read after it, as Acquire's upsert is. A role
// that may not lock rows (read-only, a standby) keeps the plain answer.
func (b *Backend) get(ctx context.Context, key string) (backend.Lease, error) {
	l, err := scanLease(b.pool.QueryRow(ctx, `SELECT `+leaseCols+` FROM `+b.tLeases+`
		WHERE key = $1 AND expires_at > clock_timestamp()`, key))
	if errors.Is(err, pgx.ErrNoRows) {
		// The expiry is judged outside the locking scan: its WHERE would
		// drop the old row version before waiting for the lock.
		l2, err2 := scanLease(b.pool.QueryRow(ctx, `WITH r AS MATERIALIZED (
				SELECT key, instance, nonce, token, expires_at FROM `+b.tLeases+` WHERE key = $1 FOR SHARE
			) SELECT `+leaseCols+` FROM r WHERE expires_at > clock_timestamp()`, key))
		var pe *pgconn.PgError
		if !errors.As(err2, &pe) || (pe.Code != "42501" && pe.Code != "25006") { // insufficient_privilege, read_only_sql_transaction
			l, err = l2, err2
		}
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return backend.Lease{}, fmt.Errorf("%w: key %q", backend.ErrNotFound, key)
	case err != nil:
		return backend.Lease{}, dbErr(ctx, fmt.Sprintf("get key %q", key), err)
	}
	return l, nil
}

// List implements backend.Leases: the unexpired leases whose keys start
// with prefix (byte-wise), in key order.
func (b *Backend) List(ctx context.Context, prefix string, limit int) ([]backend.Lease, error) {
	if err := b.gate.Enter(); err != nil {
		return nil, err
	}
	defer b.gate.Leave()
	if strings.IndexByte(prefix, 0) >= 0 {
		return nil, nil // no valid key contains NUL (nor can PostgreSQL text)
	}
	what := fmt.Sprintf("list prefix %q", prefix)
	q := `SELECT ` + leaseCols + ` FROM ` + b.tLeases + ` WHERE key >= $1 AND starts_with(key, $1) AND expires_at > clock_timestamp()`
	args := []any{prefix}
	if end, ok := prefixEnd(prefix); ok {
		q += ` AND key < $2`
		args = append(args, end)
	}
	q += ` ORDER BY key`
	if limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, limit)
	}
	rows, err := b.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, dbErr(ctx, what, err)
	}
	defer rows.Close()
	var out []backend.Lease
	for rows.Next() {
		l, err := scanLease(rows)
		if err != nil {
			return nil, dbErr(ctx, what, err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(ctx, what, err)
	}
	return out, nil
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
