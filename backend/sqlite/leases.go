package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/sqlledger"
)

// leaseRow is one row of the leases table.
type leaseRow struct {
	owner   backend.Owner
	token   uint64
	expires int64 // CLOCK_BOOTTIME ns
	bootID  string
}

// live reports whether the lease is unexpired at now during this boot.
func (b *Backend) liveLease(r *leaseRow, now int64) bool {
	return r.bootID == b.bootID && r.expires > now
}

func (r *leaseRow) view(key string, now int64) backend.Lease {
	return backend.Lease{Key: key, Owner: r.owner, Token: r.token, Remaining: time.Duration(r.expires - now)}
}

// scanner is *sql.Row or *sql.Rows.
type scanner interface{ Scan(...any) error }

func scanLease(s scanner, key *string) (*leaseRow, error) {
	var r leaseRow
	var nonce []byte
	var token int64
	dst := []any{&r.owner.Instance, &nonce, &token, &r.expires, &r.bootID}
	if key != nil {
		dst = append([]any{key}, dst...)
	}
	if err := s.Scan(dst...); err != nil {
		return nil, err
	}
	if err := sqlledger.SetNonce(&r.owner.Nonce, nonce); err != nil {
		return nil, err
	}
	r.token = uint64(token)
	return &r, nil
}

// leaseCols are the columns scanLease reads.
const leaseCols = `instance, nonce, token, expires_ns, boot_id`

// newLeases returns the shared lease layer over b's database, with what
// is SQLite's own: the clock. One host, so expiry is judged in Go by the
// boot-scoped monotonic clock (expires_ns, boot_id), read after the gate
// (or inside the write transaction) by each call; Acquire, Renew and
// Release are immediate transactions of the prepared statements below.
func newLeases(b *Backend) *sqlledger.Leases {
	return &sqlledger.Leases{
		D:      b.led.D,
		DB:     b.led.DB,
		Gate:   &b.gate,
		Table:  "leases",
		Cols:   `key, ` + leaseCols,
		Extend: b.renew,
		Clear:  b.release,
		Reader: func() (sqlledger.LeaseReader, error) {
			now, err := b.now()
			if err != nil {
				return sqlledger.LeaseReader{}, err
			}
			return sqlledger.LeaseReader{
				Live: `boot_id = ? AND expires_ns > ?`,
				Args: []any{b.bootID, now},
				Scan: func(s sqlledger.Scanner) (backend.Lease, error) {
					var key string
					r, err := scanLease(s, &key)
					if err != nil {
						return backend.Lease{}, err
					}
					return r.view(key, now), nil
				},
			}, nil
		},
		Recheck: b.recheck,
		// Keys compare with memcmp (BINARY collation), so the keys starting
		// with prefix are exactly those in [prefix, prefixEnd(prefix)).
		Prefix: func(prefix string) (string, []any) {
			if end, ok := prefixEnd(prefix); ok {
				return `key < ?`, []any{end}
			}
			return "", nil
		},
	}
}

// recheckWait bounds how long Get waits for another connection's write to
// commit before it keeps its first answer (see recheck).
const recheckWait = time.Second

// recheck is Get's second read of a key on which it found no live lease
// (sqlledger.Leases.Recheck). A Renew judges expiry inside its immediate
// transaction, but other connections — another process on the same file —
// see its new expiry only at its commit, so a read in between, after the
// old expiry passed, answered NotFound for a lease the renewal then kept:
// a lease read as expired came back (TestGetDoesNotSeeExpiryARenewCovers).
// When the key's row expired during this boot less than recheckWait ago,
// recheck reads it again in an immediate transaction, which waits for that
// writer, and judges expiry after it. It waits at most recheckWait (and
// the busy timeout), then reads the row once more without waiting (a
// renewal committed meanwhile is seen) and otherwise keeps the first
// answer, NotFound, rather than fail; a database error that is not that
// wait ending is returned: a renewal held between its write and its commit for longer than
// that (a paused process) can still be read as expired by another process
// and then named again. Without a row (never taken, released), with a row
// of an earlier boot (nothing renews it) or one expired longer ago, there
// is nothing to wait for.
func (b *Backend) recheck(ctx context.Context, key string) (backend.Lease, error) {
	cur, err := scanLease(b.stmts[stSelectLease].QueryRowContext(ctx, key), nil)
	if err != nil {
		return backend.Lease{}, err // sql.ErrNoRows: no row
	}
	now, err := b.now()
	switch {
	case err != nil:
		return backend.Lease{}, err
	case b.liveLease(cur, now): // renewed since the first read
		return cur.view(key, now), nil
	case cur.bootID != b.bootID || now-cur.expires > int64(recheckWait):
		return backend.Lease{}, sql.ErrNoRows
	}
	wctx, cancel := context.WithTimeout(ctx, recheckWait)
	defer cancel()
	var l backend.Lease
	err = b.inTx(wctx, func(tx *sql.Tx) error {
		var err error
		l, err = b.liveRead(tx.StmtContext(wctx, b.stmts[stSelectLease]).QueryRowContext(wctx, key), key)
		return err
	})
	switch {
	case err == nil || errors.Is(err, sql.ErrNoRows):
		return l, err
	case ctx.Err() != nil: // the caller's context ended while it waited
		return backend.Lease{}, stepErr(ctx, err)
	case isBusy(err) || wctx.Err() != nil && (errors.Is(err, context.DeadlineExceeded) || isInterrupt(err)):
		// The writer held on, or committed during the busy handler's last
		// sleep: a plain read (WAL: it does not wait) sees a renewal that
		// committed before it; otherwise the first answer. (A review found
		// renewals committed 950 ms into the wait read as expired.)
		return b.liveRead(b.stmts[stSelectLease].QueryRowContext(ctx, key), key)
	}
	return backend.Lease{}, err
}

// liveRead reads key's lease row, then the clock: the lease if it is live
// by then, else sql.ErrNoRows.
func (b *Backend) liveRead(row *sql.Row, key string) (backend.Lease, error) {
	cur, err := scanLease(row, nil)
	if err != nil {
		return backend.Lease{}, err
	}
	now, err := b.now()
	switch {
	case err != nil:
		return backend.Lease{}, err
	case !b.liveLease(cur, now):
		return backend.Lease{}, sql.ErrNoRows
	}
	return cur.view(key, now), nil
}

// acquire is Acquire's step. In one immediate transaction it reads the
// lease on key; if it is live it answers the same owner with the existing
// grant, renewed to ttl from now, and anyone else with a
// *backend.HeldError; otherwise it increments the key's counter and writes
// the new lease.
func (b *Backend) acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	var g backend.Grant
	err := b.write(ctx, func(tx *sql.Tx) error {
		now, err := b.now()
		if err != nil {
			return err
		}
		cur, err := scanLease(tx.StmtContext(ctx, b.stmts[stSelectLease]).QueryRowContext(ctx, key), nil)
		switch {
		case err == nil && b.liveLease(cur, now):
			if cur.owner == owner { // a retry of a request that was applied: renew it
				if _, err := tx.ExecContext(ctx, `UPDATE leases SET expires_ns = ? WHERE key = ?`, now+int64(ttl), key); err != nil {
					return stepErr(ctx, err)
				}
				g = backend.Grant{Token: cur.token, TTL: ttl}
				return nil
			}
			return &backend.HeldError{Holder: cur.view(key, now)}
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return stepErr(ctx, err)
		}
		var token int64
		if err := tx.StmtContext(ctx, b.stmts[stBumpCounter]).QueryRowContext(ctx, key).Scan(&token); err != nil {
			return stepErr(ctx, err)
		}
		if _, err := tx.StmtContext(ctx, b.stmts[stUpsertLease]).ExecContext(ctx, key, owner.Instance, owner.Nonce[:], token, now+int64(ttl), b.bootID); err != nil {
			return stepErr(ctx, err)
		}
		g = backend.Grant{Token: uint64(token), TTL: ttl}
		return nil
	})
	if err != nil {
		return backend.Grant{}, err
	}
	return g, nil
}

// Statements of the lease hot path, prepared once at Open.
const (
	stSelectLease = iota
	stBumpCounter
	stUpsertLease
	stRenewLease
	stReleaseLease
	numStmts
)

// leaseGuard is the WHERE clause shared by Renew and Release: the lease is
// held by owner+token and live during this boot. Arguments: key, instance,
// nonce, token, boot id, now.
const leaseGuard = `key = ? AND instance = ? AND nonce = ? AND token = ? AND boot_id = ? AND expires_ns > ?`

var stmtSQL = [numStmts]string{
	stSelectLease: `SELECT ` + leaseCols + ` FROM leases WHERE key = ?`,
	// The key's counter: never deleted, so tokens only grow.
	stBumpCounter: `INSERT INTO counters (key, token) VALUES (?, 1)
		ON CONFLICT (key) DO UPDATE SET token = token + 1 RETURNING token`,
	stUpsertLease: `INSERT INTO leases (key, instance, nonce, token, expires_ns, boot_id) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET instance = excluded.instance, nonce = excluded.nonce,
			token = excluded.token, expires_ns = excluded.expires_ns, boot_id = excluded.boot_id`,
	stRenewLease:   `UPDATE leases SET expires_ns = ? WHERE ` + leaseGuard,
	stReleaseLease: `DELETE FROM leases WHERE ` + leaseGuard,
}

// prepare prepares the hot-path statements (after the schema exists). It
// sets b.stmts only when every one is prepared, so a failed try (Open tries
// again on SQLITE_BUSY) leaves none open.
func (b *Backend) prepare(ctx context.Context) error {
	var stmts [numStmts]*sql.Stmt
	for i, q := range stmtSQL {
		st, err := b.db.PrepareContext(ctx, q)
		if err != nil {
			for _, p := range stmts[:i] {
				p.Close()
			}
			return fmt.Errorf("sqlite: prepare statement %d: %w", i, err)
		}
		stmts[i] = st
	}
	b.stmts = stmts
	return nil
}

// renew is Renew's guarded write (sqlledger.Leases.Extend), in an
// immediate transaction that reads the clock.
func (b *Backend) renew(ctx context.Context, req backend.RenewRequest) error {
	key, owner, token, ttl := req.Key, req.Owner, req.Token, req.TTL
	return b.write(ctx, func(tx *sql.Tx) error {
		now, err := b.now()
		if err != nil {
			return err
		}
		res, err := tx.StmtContext(ctx, b.stmts[stRenewLease]).ExecContext(ctx, now+int64(ttl), key, owner.Instance, owner.Nonce[:], int64(token), b.bootID, now)
		return b.guarded(ctx, res, err)
	})
}

// release is Release's step, its guarded write (sqlledger.Leases.Clear): it
// deletes the lease and keeps the key's counter.
func (b *Backend) release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	return b.write(ctx, func(tx *sql.Tx) error {
		now, err := b.now()
		if err != nil {
			return err
		}
		res, err := tx.StmtContext(ctx, b.stmts[stReleaseLease]).ExecContext(ctx, key, owner.Instance, owner.Nonce[:], int64(token), b.bootID, now)
		return b.guarded(ctx, res, err)
	})
}

// guarded turns the result of a guarded UPDATE or DELETE into nil (one row
// changed), the bare backend.ErrLeaseLost (no row matched; the guard says
// which key or occurrence and token) or a database error.
func (b *Backend) guarded(ctx context.Context, res sql.Result, err error) error {
	if err != nil {
		return stepErr(ctx, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return stepErr(ctx, err)
	}
	if n == 0 {
		return backend.ErrLeaseLost
	}
	return nil
}

// Acquire implements backend.Leases (acquire).
func (b *Backend) Acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	return b.g.Acquire(ctx, key, owner, ttl, b.acquire)
}

// Renew implements backend.Leases (sqlledger, with renew).
func (b *Backend) Renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	return b.g.Renew(ctx, req, b.leases.Renew)
}

// Release implements backend.Leases (release). The key's counter is kept.
func (b *Backend) Release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	return b.g.Release(ctx, key, owner, token, b.release)
}

// Get implements backend.Leases (sqlledger, by newLeases' clock).
func (b *Backend) Get(ctx context.Context, key string) (backend.Lease, error) {
	return b.g.Get(ctx, key, b.leases.Get)
}

// List implements backend.Leases (sqlledger): the unexpired leases whose
// keys start with prefix (byte-wise, like strings.HasPrefix), in key
// order.
func (b *Backend) List(ctx context.Context, prefix string, limit int) ([]backend.Lease, error) {
	return b.g.List(ctx, prefix, limit, b.leases.List)
}

// prefixEnd returns the least string greater than every string that starts
// with p, or false if there is none (p is empty or all 0xff bytes).
func prefixEnd(p string) (string, bool) {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}
