package mysql

import (
	"context"
	"database/sql"
	"sync"
)

// stmtCache holds the claim path's prepared statements. The driver
// prepares every statement that has arguments and then executes it: two
// round trips. database/sql keeps a *sql.Stmt prepared on each connection
// it ran on (a transaction's Tx.StmtContext reuses it too), so after the
// first use on a connection each costs one round trip.
type stmtCache struct {
	mu     sync.Mutex
	m      map[string]*sql.Stmt
	closed bool
}

// stmt returns query prepared on b's pool, preparing it on first use.
func (b *Backend) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	c := &b.stmts
	c.mu.Lock()
	s := c.m[query]
	c.mu.Unlock()
	if s != nil {
		return s, nil
	}
	s, err := b.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev := c.m[query]; prev != nil || c.closed { // prepared meanwhile, or closing
		s.Close()
		if prev == nil {
			return nil, sql.ErrConnDone
		}
		return prev, nil
	}
	if c.m == nil {
		c.m = map[string]*sql.Stmt{}
	}
	c.m[query] = s
	return s, nil
}

// closeAll closes the cached statements (Close).
func (c *stmtCache) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, s := range c.m {
		s.Close()
	}
	c.m = nil
}

// execIn executes query with args in tx through its cached statement. A
// statement not cached yet runs unprepared on tx's connection and is
// prepared on the pool in the background: a transaction holding row locks
// never waits for a prepare through the pool. It did, on a fresh backend,
// and 32 concurrent first claims of one occurrence hung for InnoDB's 50 s
// lock wait (conformance LedgerOneWinnerAmongConcurrentClaims, about one
// run in five); why the server held the prepare is not known.
func (b *Backend) execIn(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	c := &b.stmts
	c.mu.Lock()
	s := c.m[query]
	c.mu.Unlock()
	if s == nil {
		go b.stmt(context.Background(), query) //nolint:errcheck // a failed prepare leaves the next claim unprepared, no worse
		return tx.ExecContext(ctx, query, args...)
	}
	return tx.StmtContext(ctx, s).ExecContext(ctx, args...)
}
