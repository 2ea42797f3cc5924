package mysql

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/backend"
)

// TestGetDoesNotSeeExpiryARenewCovers: Renew judges expiry by NOW(6) when
// its UPDATE reaches the row, but its new expiry is visible only at commit.
// If the old expiry passes in between, a Get (a consistent read) answered
// NotFound, and then the renewal answered OK for the same grant, which Get
// then names again: a lease read as expired came back (PostgreSQL's
// randomized check showed it; the same reads are here). The gap is made by
// an AFTER UPDATE trigger that waits on a user lock the test holds.
func TestGetDoesNotSeeExpiryARenewCovers(t *testing.T) {
	b, u := openTest(t)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := driver.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	ctl, err := db.Conn(ctx) // holds the user lock: one session
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()

	const ttl = 400 * time.Millisecond
	holder := backend.Owner{Instance: "slow", Nonce: backend.NewNonce()}
	g, err := b.Acquire(ctx, "k", holder, ttl)
	if err != nil {
		t.Fatal(err)
	}
	gate := "lh_gate_" + holder.Nonce.String()[:12]
	var got int
	if err := ctl.QueryRowContext(ctx, `SELECT GET_LOCK(?, 10)`, gate).Scan(&got); err != nil || got != 1 {
		t.Fatalf("GET_LOCK: %d, %v", got, err)
	}
	defer ctl.ExecContext(context.Background(), `DO RELEASE_LOCK(?)`, gate)
	if _, err := ctl.ExecContext(ctx, `CREATE TRIGGER lh_gate AFTER UPDATE ON `+b.tLeases+` FOR EACH ROW
		BEGIN IF NEW.instance = 'slow' THEN DO GET_LOCK('`+gate+`', 30); DO RELEASE_LOCK('`+gate+`'); END IF; END`); err != nil {
		t.Fatalf("trigger: %v", err)
	}

	type result struct {
		g   backend.Grant
		err error
	}
	renewed := make(chan result, 1)
	go func() {
		g, err := b.Renew(ctx, backend.RenewRequest{Key: "k", Owner: holder, Token: g.Token, TTL: 20 * ttl})
		renewed <- result{g, err}
	}()
	waitForMySQL(t, ctl, `SELECT COUNT(*) > 0 FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND STATE = 'User lock'`)
	// The old expiry passes, by the server's clock, while the renewal is
	// not committed (a consistent read sees the old row version).
	waitForMySQL(t, ctl, `SELECT expires_at <= NOW(6) FROM `+b.tLeases+` WHERE k = 'k'`)

	type read struct {
		l   backend.Lease
		err error
	}
	reads := make(chan read, 1)
	go func() {
		l, err := b.Get(ctx, "k")
		reads <- read{l, err}
	}()
	// Let the Get answer, or wait on the renewal's row lock (its locking
	// re-read is at the server: an InnoDB lock wait, or the statement
	// seen in "Statistics"), then open.
	var first *read
	for end := time.Now().Add(10 * time.Second); first == nil; {
		select {
		case r := <-reads:
			first = &r
			continue
		case <-time.After(5 * time.Millisecond):
		}
		var waiting bool
		if err := ctl.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT')
			+ (SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND INFO LIKE '%LOCK IN SHARE MODE%') > 0`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(end) {
			t.Fatal("Get neither answered nor waited on the renewal's row lock within 10 s")
		}
	}
	if _, err := ctl.ExecContext(ctx, `DO RELEASE_LOCK(?)`, gate); err != nil {
		t.Fatal(err)
	}
	if first == nil {
		r := <-reads
		first = &r
	}
	r := <-renewed
	after, afterErr := b.Get(ctx, "k")
	t.Logf("Get in the gap: %+v, %v; Renew: %+v, %v; Get after: %+v, %v", first.l, first.err, r.g, r.err, after, afterErr)
	if errors.Is(first.err, backend.ErrNotFound) && r.err == nil && afterErr == nil && after.Token == g.Token {
		t.Fatalf("Get answered NotFound (the lease expired), then Renew of the same grant (token %d) answered OK and Get names it again: a lease read as expired came back", g.Token)
	}
}

// waitForMySQL polls q (a boolean query) on c until it is true, for up to 10 s.
func waitForMySQL(t *testing.T, c *sql.Conn, q string) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		var ok bool
		if err := c.QueryRowContext(context.Background(), q).Scan(&ok); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if ok {
			return
		}
	}
	t.Fatalf("not true within 10 s: %s", q)
}
