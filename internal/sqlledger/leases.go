package sqlledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// LeaseReader is how a call reads leases now: the condition that a lease
// row is live (unexpired), its arguments, and the scan of a row of the
// Leases' Cols.
type LeaseReader struct {
	Live string
	Args []any
	Scan func(Scanner) (backend.Lease, error)
}

// Leases is the lease layer of a SQL backend (backend.Leases) written
// once: the steps a backend's guard.Guard runs for Renew (answering the
// bare backend.ErrLeaseLost when its guarded write matched no row, and the
// TTL granted), Get (not found: the bare backend.ErrNotFound) and List
// (prefix, limit and scan); the guard checks the arguments and the closed
// state, and names failures and answers. Each backend fills one in at New
// with what differs: Release's guarded write (Clear), the clock a lease is
// judged live by (Reader), how a key range is bounded (Prefix), and whether
// Get reads again under a row lock (Relock). Acquire's step is the
// backend's own (how it takes a token atomically).
type Leases struct {
	D    *Dialect
	DB   DB   // the pool, for reads
	Gate Gate // the backend's closed state, held while a read runs
	// Table is the leases table's (qualified) name; Cols the columns that
	// Reader's Scan reads.
	Table, Cols string

	// Extend is Renew's guarded write and Clear Release's (Clear is the
	// step of Release as it is): each enters Gate and answers the bare
	// backend.ErrLeaseLost when the lease is not held by the owner and
	// token, unexpired.
	Extend func(ctx context.Context, req backend.RenewRequest) error
	Clear  func(ctx context.Context, key string, owner backend.Owner, token uint64) error
	// Granted is the TTL a Renew of ttl grants; nil: ttl as it is.
	Granted func(ttl time.Duration) time.Duration
	// Reader returns how to read leases now.
	Reader func() (LeaseReader, error)
	// Prefix returns the condition, beside KeyColumn >= prefix, that the
	// key starts with prefix (byte-wise), and its arguments; "" for none.
	Prefix func(prefix string) (cond string, args []any)
	// Relock, when set, is a statement that reads the key's row again
	// under a shared row lock, with expiry judged after the lock (its one
	// argument is the key; Reader's Scan reads it): see Read. CannotLock,
	// set with it, reports the error of a role or server that may not
	// lock rows.
	Relock     string
	CannotLock func(error) bool
	// Recheck, when set instead of Relock, is that second read for a
	// backend without row locks (SQLite): it reads the key's lease again
	// ordered after any write of its row in progress, judging expiry after
	// it, and answers D.NoRows when there is none; see Read.
	Recheck func(ctx context.Context, key string) (backend.Lease, error)
}

// ServerLeases returns the Leases over table for a dialect that judges
// expiry by the server's clock (Now), sharing l's dialect, pool, gate,
// and writes: a lease is live by LeaseLive and read as LeaseCols by
// ScanLease, Renew and Release are guarded UPDATEs (LeaseGuard) run by
// l.Write, and a renewal grants whole microseconds (Micros). The caller
// adds Prefix, Relock and CannotLock (and may replace Clear).
func (l *Ledger) ServerLeases(table string) *Leases {
	d := l.D
	ls := &Leases{D: d, DB: l.DB, Gate: l.Gate, Table: table, Cols: d.LeaseCols(), Granted: MicrosTTL}
	reader := LeaseReader{Live: d.LeaseLive(), Scan: d.ScanLease}
	ls.Reader = func() (LeaseReader, error) { return reader, nil }
	// Renewed to the TTL from now, never shortened (GREATEST, as the
	// ledger's heartbeats): a renewal that waited on the row lock must not
	// move back the expiry a later one set (MySQL's NOW(6) is the
	// statement's start; see each backend's acquireSQL).
	renew := d.Bind(`UPDATE ` + table + ` SET expires_at = GREATEST(expires_at, ` + d.Later("?") + `) WHERE ` + d.LeaseGuard())
	// The holder is cleared and the row kept: it is the key's token counter.
	release := d.Bind(`UPDATE ` + table + ` SET expires_at = NULL WHERE ` + d.LeaseGuard())
	guarded := func(ctx context.Context, q string, args ...any) error {
		n, err := l.Write(ctx, q, args...)
		switch {
		case err != nil:
			return err
		case n == 0:
			return backend.ErrLeaseLost
		}
		return nil
	}
	ls.Extend = func(ctx context.Context, req backend.RenewRequest) error {
		return guarded(ctx, renew, append([]any{Micros(req.TTL)}, d.LeaseGuardArgs(req.Key, req.Owner, req.Token)...)...)
	}
	ls.Clear = func(ctx context.Context, key string, owner backend.Owner, token uint64) error {
		return guarded(ctx, release, d.LeaseGuardArgs(key, owner, token)...)
	}
	return ls
}

// LeaseLive is the condition that a lease row is unexpired by the
// server's clock.
func (d *Dialect) LeaseLive() string { return `expires_at > ` + d.Now }

// LeaseCols are the columns ScanLease reads, for a dialect that judges
// expiry by the server's clock: the last is the lease's remaining time.
func (d *Dialect) LeaseCols() string {
	return d.KeyColumn + `, instance, nonce, token, ` + d.Remaining
}

// LeaseGuard is the WHERE clause of a guarded write of a lease, for a
// dialect that judges expiry by the server's clock: the lease is held by
// owner and token, and unexpired. Its placeholders take key, instance,
// nonce, token (LeaseGuardArgs).
func (d *Dialect) LeaseGuard() string {
	return d.KeyColumn + ` = ? AND instance = ? AND nonce = ? AND token = ? AND ` + d.LeaseLive()
}

// LeaseGuardArgs are the arguments of LeaseGuard.
func (d *Dialect) LeaseGuardArgs(key string, owner backend.Owner, token uint64) []any {
	return []any{key, owner.Instance, owner.Nonce[:], d.token(token)}
}

// ScanLease reads a lease of LeaseCols.
func (d *Dialect) ScanLease(s Scanner) (backend.Lease, error) {
	var (
		l     backend.Lease
		nonce []byte
		remUS int64
	)
	token, scanned := d.tokenScan(&l.Token)
	if err := s.Scan(&l.Key, &l.Owner.Instance, &nonce, token, &remUS); err != nil {
		return l, err
	}
	if err := SetNonce(&l.Owner.Nonce, nonce); err != nil {
		return l, err
	}
	scanned()
	l.Remaining = time.Duration(remUS) * time.Microsecond
	return l, nil
}

// Renew is the step of Renew (guard.Guard.Renew): Extend, and the grant.
func (l *Leases) Renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	if err := l.Extend(ctx, req); err != nil {
		return backend.Grant{}, err
	}
	ttl := req.TTL
	if l.Granted != nil {
		ttl = l.Granted(ttl)
	}
	return backend.Grant{Token: req.Token, TTL: ttl}, nil
}

// Get is the step of Get (guard.Guard.Get): Read, inside Gate.
func (l *Leases) Get(ctx context.Context, key string) (backend.Lease, error) {
	if err := l.Gate.Enter(); err != nil {
		return backend.Lease{}, err
	}
	defer l.Gate.Leave()
	return l.Read(ctx, key)
}

// Read reads the key's unexpired lease (the bare backend.ErrNotFound:
// none), for a caller inside Gate (Get, and an Acquire that found the key
// held).
//
// With Relock, a read that finds none reads the row again under a shared
// row lock, judging expiry after the lock: a Renew (or Release) judges
// expiry when its UPDATE reaches the row, but its effect is visible only
// at its commit, so a snapshot read in between answered NotFound for a
// lease the renewal then kept (a lease read as expired came back:
// TestGetDoesNotSeeExpiryARenewCovers). Waiting for the row's writer
// orders the read after it, as Acquire's upsert is. A role that may not
// lock rows (a read-only one, a read-only server or standby) keeps the
// first answer. Recheck does the same where rows cannot be locked.
func (l *Leases) Read(ctx context.Context, key string) (backend.Lease, error) {
	r, err := l.Reader()
	if err != nil {
		return backend.Lease{}, err
	}
	lease, err := r.Scan(l.DB.QueryRow(ctx, l.ReadSQL(r.Live), append([]any{key}, r.Args...)...))
	switch {
	case !errors.Is(err, l.D.NoRows):
	case l.Relock != "":
		l2, err2 := r.Scan(l.DB.QueryRow(ctx, l.Relock, key))
		if !l.CannotLock(err2) {
			lease, err = l2, err2
		}
	case l.Recheck != nil:
		lease, err = l.Recheck(ctx, key)
	}
	switch {
	case errors.Is(err, l.D.NoRows):
		return backend.Lease{}, backend.ErrNotFound
	case err != nil:
		return backend.Lease{}, l.D.Err(ctx, err)
	}
	return lease, nil
}

// ReadSQL is Read's statement: the key's row if live, where live is
// Reader's condition; its placeholders take the key, then live's.
func (l *Leases) ReadSQL(live string) string {
	return l.D.Bind(`SELECT ` + l.Cols + ` FROM ` + l.Table + ` WHERE ` + l.D.KeyColumn + ` = ? AND ` + live)
}

// List is the step of List (guard.Guard.List, which answers a prefix
// holding NUL itself): the unexpired leases whose keys start with prefix
// (byte-wise, like strings.HasPrefix), in key order; limit 0: all.
func (l *Leases) List(ctx context.Context, prefix string, limit int) ([]backend.Lease, error) {
	if err := l.Gate.Enter(); err != nil {
		return nil, err
	}
	defer l.Gate.Leave()
	r, err := l.Reader()
	if err != nil {
		return nil, err
	}
	k := l.D.KeyColumn
	where, args := []string{k + " >= ?"}, []any{prefix}
	if cond, cargs := l.Prefix(prefix); cond != "" {
		where, args = append(where, cond), append(args, cargs...)
	}
	where, args = append(where, r.Live), append(args, r.Args...)
	q := `SELECT ` + l.Cols + ` FROM ` + l.Table + ` WHERE ` + strings.Join(where, " AND ") + ` ORDER BY ` + k
	if limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, limit)
	}
	rows, err := l.DB.Query(ctx, l.D.Bind(q), args...)
	return collect(ctx, l.D, rows, err, r.Scan)
}
