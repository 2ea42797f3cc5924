//go:build linux

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// TestGetDoesNotSeeExpiryARenewCovers: a Renew judges expiry inside its
// immediate transaction, but another connection sees its new expiry only
// at its commit. A Get from another process (here another Backend, with a
// pool of its own, on the same file) that read in between, after the old
// expiry passed, answered NotFound for a lease the renewal then kept, and
// a later Get named the same grant again: a lease read as expired came
// back. The renewal slow between its UPDATE and its COMMIT is made
// deterministic by running renew's own statement in a transaction the test
// holds open; both Backends share one controlled clock.
// (Get waits for such a renewal at most recheckWait: see recheck.)
func TestGetDoesNotSeeExpiryARenewCovers(t *testing.T) {
	ctx := context.Background()
	path := dbPath(t)
	clk := newFakeClock()
	a := open(t, path, clk.option())
	b := open(t, path, clk.option())

	const ttl = 10 * time.Second
	holder := own("slow")
	g, err := a.Acquire(ctx, "k", holder, ttl)
	must(t, err, "acquire")

	// The renewal: sent while the lease is live, it judges it live and
	// updates the row, and is not committed yet.
	raw, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)")
	must(t, err, "open a raw connection")
	defer raw.Close()
	tx, err := raw.BeginTx(ctx, nil)
	must(t, err, "begin the renewal")
	defer tx.Rollback()
	now, err := a.now()
	must(t, err, "clock")
	res, err := tx.ExecContext(ctx, stmtSQL[stRenewLease], now+int64(20*ttl), "k", holder.Instance, holder.Nonce[:], int64(g.Token), a.bootID, now)
	must(t, err, "the renewal's update")
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("the renewal's update changed %d rows, want 1 (the lease is live)", n)
	}

	// The old expiry passes while the renewal is not committed (by less
	// than recheckWait: a renewal held on longer is not waited for).
	clk.advance(ttl + recheckWait/2)
	type read struct {
		l   backend.Lease
		err error
	}
	got := make(chan read, 1)
	go func() {
		l, err := b.Get(ctx, "k")
		got <- read{l, err}
	}()
	var first read
	select {
	case first = <-got: // answered without waiting for the renewal
		must(t, tx.Commit(), "commit the renewal")
	case <-time.After(300 * time.Millisecond): // waiting for it (or not yet run: it then reads the commit)
		must(t, tx.Commit(), "commit the renewal")
		first = <-got
	}
	after, afterErr := b.Get(ctx, "k")
	t.Logf("Get during the renewal's commit gap: %+v, %v; after: %+v, %v", first.l, first.err, after, afterErr)
	if afterErr != nil || after.Token != g.Token {
		t.Fatalf("Get after the renewal committed: %+v, %v; want the lease, token %d", after, afterErr, g.Token)
	}
	if errors.Is(first.err, backend.ErrNotFound) {
		t.Fatalf("Get answered NotFound during the renewal's commit gap, then names the same grant (token %d) again: a lease read as expired came back", g.Token)
	}
	if first.err != nil || first.l.Token != g.Token {
		t.Fatalf("Get during the renewal's commit gap: %+v, %v; want the lease, token %d", first.l, first.err, g.Token)
	}
}

// TestGetOfExpiredLeaseDuringAnotherWrite: Get's second read of an expired
// row (recheck) waits for another process's write transaction — of any key
// — but keeps its first answer, NotFound, when that writer holds on past
// the busy timeout (or recheckWait): before the recheck a read never
// waited, and the wait must not turn the answer into SQLITE_BUSY (found
// by review of the change).
func TestGetOfExpiredLeaseDuringAnotherWrite(t *testing.T) {
	ctx := context.Background()
	path := dbPath(t)
	clk := newFakeClock()
	b := open(t, path, clk.option(), WithBusyTimeout(100*time.Millisecond))
	_, err := b.Acquire(ctx, "k", own("a"), time.Second)
	must(t, err, "acquire")
	clk.advance(1500 * time.Millisecond) // expired half a second ago: rechecked; its row stays

	tx := otherProcessWriting(t, path)
	defer tx.Rollback()
	if _, err := b.Get(ctx, "k"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Get of an expired lease while another process writes: %v, want ErrNotFound", err)
	}
	// Its caller's context ending while it waits is that call's answer.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.Get(cctx, "k"); !errors.Is(err, context.Canceled) && !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Get with an ended context while another process writes: %v, want context.Canceled or ErrNotFound", err)
	}
}

// otherProcessWriting begins, on a connection of its own to path, a write
// transaction that holds SQLite's write lock until the caller ends it.
func otherProcessWriting(t *testing.T, path string) *sql.Tx {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)")
	must(t, err, "open a raw connection")
	t.Cleanup(func() { raw.Close() })
	tx, err := raw.BeginTx(context.Background(), nil)
	must(t, err, "begin another process's write")
	_, err = tx.Exec(`INSERT INTO counters (key, token) VALUES ('other', 1)`)
	must(t, err, "another process's write")
	return tx
}
