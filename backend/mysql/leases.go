package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/sqlledger"
)

// acquireSQL: free is "expires_at IS NULL OR expires_at <= NOW(6)" on the
// row as it was; token, instance and nonce test only expires_at, which is
// assigned last (ODKU assigns left to right). expires_at itself is set when
// the (already assigned) owner is the caller: the key was free, or the
// request is a retry of the caller's applied one, which is renewed to the
// TTL from now but never shortened: NOW(6) is the statement's start, so a
// retry that waited on the row lock must not move back the expiry a later
// Renew set (Renew and the ledger's heartbeats use GREATEST for the same
// reason). A grant over an existing row returns
// its token through LAST_INSERT_ID(expr); an insert (the key's first grant,
// token 1) and a row left unchanged both report 0 and are told apart by
// reading the row. (LAST_INSERT_ID(1) in VALUES would not do: VALUES is
// evaluated before the duplicate is found, so it would report 1 even when
// the row is left unchanged.)
func (b *Backend) acquireSQL() string {
	const free = `(expires_at IS NULL OR expires_at <= NOW(6))`
	return `INSERT INTO ` + b.tLeases + ` (k, instance, nonce, token, expires_at)
		VALUES (?, ?, ?, 1, NOW(6) + INTERVAL ? MICROSECOND)
		ON DUPLICATE KEY UPDATE
			token = IF(` + free + `, LAST_INSERT_ID(token + 1), token),
			instance = IF(` + free + `, VALUES(instance), instance),
			nonce = IF(` + free + `, VALUES(nonce), nonce),
			expires_at = IF(nonce = VALUES(nonce) AND instance = VALUES(instance),
				IF(` + free + `, VALUES(expires_at), GREATEST(expires_at, VALUES(expires_at))), expires_at)`
}

// Acquire implements backend.Leases: one statement when the key is free or
// expired; a second read when it is held (to answer the same owner's retry,
// or to name the holder).
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
	for attempt := 0; attempt < 10; attempt++ {
		var token int64
		err := retryDeadlock(ctx, func() error {
			res, err := b.db.ExecContext(ctx, b.acquireSQL(), key, owner.Instance, owner.Nonce[:], us)
			if err != nil {
				return err
			}
			token, err = res.LastInsertId()
			return err
		})
		if err != nil {
			return backend.Grant{}, dbErr(ctx, what, err)
		}
		if token > 0 {
			return backend.Grant{Token: uint64(token), TTL: granted}, nil
		}
		l, err := b.get(ctx, key)
		switch {
		case err == nil && l.Owner == owner: // a retry of a request that was applied
			return backend.Grant{Token: l.Token, TTL: granted}, nil
		case err == nil:
			return backend.Grant{}, &backend.HeldError{Holder: l}
		case !errors.Is(err, backend.ErrNotFound):
			return backend.Grant{}, err
		}
		// Released or expired in between: try again.
	}
	return backend.Grant{}, fmt.Errorf("mysql: %s: no answer after 10 attempts under contention", what)
}

// leaseGuard: held by owner+token, unexpired. Arguments: key, instance,
// nonce, token.
const leaseGuard = `k = ? AND instance = ? AND nonce = ? AND token = ? AND expires_at > NOW(6)`

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
	err := b.guarded(ctx, fmt.Sprintf("renew key %q", key),
		`UPDATE `+b.tLeases+` SET expires_at = GREATEST(expires_at, NOW(6) + INTERVAL ? MICROSECOND) WHERE `+leaseGuard,
		us, key, owner.Instance, owner.Nonce[:], token)
	if errors.Is(err, backend.ErrLeaseLost) {
		return backend.Grant{}, fmt.Errorf("%w: key %q, token %d", backend.ErrLeaseLost, key, token)
	}
	if err != nil {
		return backend.Grant{}, err
	}
	return backend.Grant{Token: token, TTL: time.Duration(us) * time.Microsecond}, nil
}

// Release implements backend.Leases: it clears the holder and keeps the row
// (the key's token counter).
func (b *Backend) Release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	if err := backend.CheckRelease(key, owner, token); err != nil {
		return err
	}
	if err := b.gate.Enter(); err != nil {
		return err
	}
	defer b.gate.Leave()
	err := b.guarded(ctx, fmt.Sprintf("release key %q", key),
		`UPDATE `+b.tLeases+` SET expires_at = NULL WHERE `+leaseGuard, key, owner.Instance, owner.Nonce[:], token)
	if errors.Is(err, backend.ErrLeaseLost) {
		return fmt.Errorf("%w: key %q, token %d", backend.ErrLeaseLost, key, token)
	}
	return err
}

// guarded runs a guarded UPDATE: nil when it matched a row (the connection
// counts found rows), backend.ErrLeaseLost when it matched none.
func (b *Backend) guarded(ctx context.Context, what, q string, args ...any) error {
	n, err := b.exec(ctx, what, q, args...)
	if err != nil {
		return err
	}
	if n == 0 {
		return backend.ErrLeaseLost
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

const leaseCols = `k, instance, nonce, token, TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at)`

type scanner interface{ Scan(...any) error }

func scanLease(s scanner) (backend.Lease, error) {
	var (
		l     backend.Lease
		nonce []byte
		remUS int64
	)
	if err := s.Scan(&l.Key, &l.Owner.Instance, &nonce, &l.Token, &remUS); err != nil {
		return l, err
	}
	l.Remaining = time.Duration(remUS) * time.Microsecond
	return l, sqlledger.SetNonce(&l.Owner.Nonce, nonce)
}

// get reads the key's unexpired lease. A consistent read first; if it
// finds none, a locking read (LOCK IN SHARE MODE), which waits for a
// writer of the row and reads its committed result: a Renew (or Release)
// judges expiry when its UPDATE reaches the row, but its effect is visible
// only at its commit, so a consistent read in between answered NotFound for
// a lease the renewal then kept (TestGetDoesNotSeeExpiryARenewCovers; the
// expiry condition is judged on the row read after the lock). A role that
// may not lock rows, or a read-only server, keeps the first answer.
func (b *Backend) get(ctx context.Context, key string) (backend.Lease, error) {
	q := `SELECT ` + leaseCols + ` FROM ` + b.tLeases + ` WHERE k = ? AND expires_at > NOW(6)`
	l, err := scanLease(b.db.QueryRowContext(ctx, q, key))
	if errors.Is(err, sql.ErrNoRows) {
		l2, err2 := scanLease(b.db.QueryRowContext(ctx, q+` LOCK IN SHARE MODE`, key))
		var me *driver.MySQLError
		if !errors.As(err2, &me) || !(refusedErrors[me.Number] || me.Number == 1290 || me.Number == 1792) { // --read-only, read-only transaction
			l, err = l2, err2
		}
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return backend.Lease{}, fmt.Errorf("%w: key %q", backend.ErrNotFound, key)
	case err != nil:
		return backend.Lease{}, dbErr(ctx, fmt.Sprintf("get key %q", key), err)
	}
	return l, nil
}

// List implements backend.Leases: unexpired leases whose keys start with
// prefix (byte-wise), in key order.
func (b *Backend) List(ctx context.Context, prefix string, limit int) ([]backend.Lease, error) {
	if err := b.gate.Enter(); err != nil {
		return nil, err
	}
	defer b.gate.Leave()
	if strings.IndexByte(prefix, 0) >= 0 {
		return nil, nil
	}
	what := fmt.Sprintf("list prefix %q", prefix)
	q := `SELECT ` + leaseCols + ` FROM ` + b.tLeases + ` WHERE k >= ? AND LEFT(k, ?) = ? AND expires_at > NOW(6) ORDER BY k`
	if limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, limit)
	}
	rows, err := b.db.QueryContext(ctx, q, prefix, len(prefix), prefix)
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
