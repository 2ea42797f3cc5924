package mysql

import (
	"context"
	"errors"
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

// newLeases returns the shared lease layer over b's leases table, with
// what is MySQL's own: the key-range condition of List, and Get's locking
// re-read. (Acquire's upsert is acquire.)
func newLeases(b *Backend) *sqlledger.Leases {
	ls := b.led.ServerLeases(b.tLeases)
	// k is VARBINARY, so LEFT counts bytes: a byte-wise prefix.
	ls.Prefix = func(prefix string) (string, []any) { return `LEFT(k, ?) = ?`, []any{len(prefix), prefix} }
	// A locking read (LOCK IN SHARE MODE) waits for a writer of the row and
	// reads its committed result; the expiry condition is judged on the
	// row read after the lock. A role that may not lock rows, or a
	// read-only server, keeps the first answer.
	ls.Relock = ls.ReadSQL(ls.D.LeaseLive()) + ` LOCK IN SHARE MODE`
	ls.CannotLock = func(err error) bool {
		var me *driver.MySQLError
		return errors.As(err, &me) && (refusedErrors[me.Number] || me.Number == 1290 || me.Number == 1792) // --read-only, read-only transaction
	}
	return ls
}

// acquire is Acquire's step: one statement when the key is free or
// expired; a second read when it is held (to answer the same owner's
// retry, or to name the holder).
func (b *Backend) acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	if err := b.gate.Enter(); err != nil {
		return backend.Grant{}, err
	}
	defer b.gate.Leave()
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
			return backend.Grant{}, stepErr(ctx, err)
		}
		if token > 0 {
			return backend.Grant{Token: uint64(token), TTL: granted}, nil
		}
		l, err := b.leases.Read(ctx, key)
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
	return backend.Grant{}, errors.New("no answer after 10 attempts under contention")
}

// Acquire implements backend.Leases (acquire).
func (b *Backend) Acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	return b.g.Acquire(ctx, key, owner, ttl, b.acquire)
}

// Renew implements backend.Leases (sqlledger: a guarded UPDATE, retried
// on deadlock like every write of exec).
func (b *Backend) Renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	return b.g.Renew(ctx, req, b.leases.Renew)
}

// Release implements backend.Leases (sqlledger): it clears the holder and
// keeps the row (the key's token counter).
func (b *Backend) Release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	return b.g.Release(ctx, key, owner, token, b.leases.Clear)
}

// Get implements backend.Leases (sqlledger, with newLeases' locking
// re-read).
func (b *Backend) Get(ctx context.Context, key string) (backend.Lease, error) {
	return b.g.Get(ctx, key, b.leases.Get)
}

// List implements backend.Leases (sqlledger): unexpired leases whose keys
// start with prefix (byte-wise), in key order.
func (b *Backend) List(ctx context.Context, prefix string, limit int) ([]backend.Lease, error) {
	return b.g.List(ctx, prefix, limit, b.leases.List)
}
