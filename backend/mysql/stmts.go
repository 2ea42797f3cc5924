package mysql

import (
	"context"
	"database/sql"
	"sync"
	"time"
)

// stmtCache holds the claim path's prepared statements. The driver
// prepares every statement that has arguments and then executes it: two
// round trips. database/sql keeps a *sql.Stmt prepared on each connection
// it ran on (a transaction's Tx.StmtContext reuses it too), so after the
// first use on a connection each costs one round trip.
//
// Background prepares (execIn) are at most one in flight per statement;
// Close cancels them, waits for them, and closes what they prepared.
type stmtCache struct {
	mu       sync.Mutex
	m        map[string]*sql.Stmt
	inflight map[string]bool // statements being prepared in the background
	closed   bool

	wg     sync.WaitGroup     // the background prepares
	ctx    context.Context    // theirs: cancelled by closeAll
	cancel context.CancelFunc // (both made with the first one)

	// preparing, if set, is called by each background prepare before it
	// prepares query; prepared, if set, after it prepared s, before the
	// cache takes it (tests: count prepares, hold one across Close).
	preparing func(query string)
	prepared  func(query string, s *sql.Stmt)
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
	return c.put(query, s)
}

// put caches s as query's statement, unless one was cached meanwhile (then
// that one is returned) or the cache is closed; s is closed when not kept.
//
// s is closed after mu is released, never under it: closing a statement
// waits for every connection it was prepared on to be free, and one of them
// may be a claim's transaction waiting on a row lock whose holder waits for
// mu in execIn — a cycle through the server that only InnoDB's 50 s lock
// wait timeout broke (TestFirstClaimsOfOneJobDoNotStall).
func (c *stmtCache) put(query string, s *sql.Stmt) (*sql.Stmt, error) {
	c.mu.Lock()
	prev, closed := c.m[query], c.closed
	keep := prev == nil && !closed
	if keep {
		if c.m == nil {
			c.m = map[string]*sql.Stmt{}
		}
		c.m[query] = s
	}
	if !closed && !keep {
		c.wg.Add(1) // closeAll waits for this close too
	}
	c.mu.Unlock()
	switch {
	case keep:
		return s, nil
	case closed:
		s.Close()
		return nil, sql.ErrConnDone
	}
	// Prepared meanwhile. The duplicate is closed in the background: its
	// close may wait for a connection busy in another claim's transaction,
	// and this claim has no reason to wait for that.
	go func() {
		defer c.wg.Done()
		s.Close()
	}()
	return prev, nil
}

// closeAll closes the cached statements, cancels the background prepares
// and waits for them; a statement one of them prepared is closed by put
// (Close).
func (c *stmtCache) closeAll() {
	c.mu.Lock()
	c.closed = true
	m := c.m
	c.m = nil
	if c.cancel != nil {
		c.cancel()
	}
	c.mu.Unlock()
	for _, s := range m { // outside mu, as in put
		s.Close()
	}
	c.wg.Wait() // outside mu: the prepares take it to finish
}

// execIn executes query with args in tx through its cached statement. A
// statement not cached yet runs unprepared on tx's connection and is
// prepared on the pool in the background: a transaction holding row locks
// never waits for a prepare through the pool. A burst of first claims
// starts one prepare per statement, not one per claim.
func (b *Backend) execIn(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	c := &b.stmts
	c.mu.Lock()
	s := c.m[query]
	if s == nil && !c.closed && !c.inflight[query] {
		if c.inflight == nil {
			c.inflight = map[string]bool{}
			c.ctx, c.cancel = context.WithCancel(context.Background())
		}
		c.inflight[query] = true
		c.wg.Add(1) // under mu, before closeAll can set closed and Wait
		go b.prepareInBackground(query)
	}
	c.mu.Unlock()
	if s == nil {
		return tx.ExecContext(ctx, query, args...)
	}
	return tx.StmtContext(ctx, s).ExecContext(ctx, args...)
}

// backgroundPrepareTimeout bounds a background prepare, so that a hung one
// does not keep its statement uncached (and a pool connection taken) until
// Close.
const backgroundPrepareTimeout = 30 * time.Second

// prepareInBackground prepares query on the pool for execIn and caches it.
// A failed prepare leaves the statement to the next claim to try again (it
// runs unprepared meanwhile, no worse).
func (b *Backend) prepareInBackground(query string) {
	c := &b.stmts
	defer c.wg.Done()
	defer func() {
		c.mu.Lock()
		delete(c.inflight, query)
		c.mu.Unlock()
	}()
	if c.preparing != nil {
		c.preparing(query)
	}
	ctx, cancel := context.WithTimeout(c.ctx, backgroundPrepareTimeout)
	defer cancel()
	s, err := b.db.PrepareContext(ctx, query)
	if err != nil {
		return
	}
	if c.prepared != nil {
		c.prepared(query, s)
	}
	c.put(query, s) //nolint:errcheck // closed by put when not kept
}
