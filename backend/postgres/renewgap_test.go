package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/backend"
)

// TestGetDoesNotSeeExpiryARenewCovers: Renew judges expiry by
// clock_timestamp() when its UPDATE reaches the row, but its new expiry is
// visible only at commit. If the old expiry passes in between, a Get (a
// snapshot read) answered NotFound, and then the renewal answered OK for
// the same grant, which Get then names again: a lease read as expired came
// back (the randomized check's leases history, seed 11137352397253493775,
// under load ~30). The gap is made deterministic by an AFTER UPDATE
// trigger that waits on an advisory lock the test holds.
func TestGetDoesNotSeeExpiryARenewCovers(t *testing.T) {
	u, schema := freshSchema(t)
	ctx := context.Background()
	b, err := Open(ctx, u, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctl, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close(ctx)

	const ttl = 400 * time.Millisecond
	holder := backend.Owner{Instance: "slow", Nonce: backend.NewNonce()}
	g, err := b.Acquire(ctx, "k", holder, ttl)
	if err != nil {
		t.Fatal(err)
	}
	lockKey := int64(0x1ea5e)
	for _, q := range []string{
		fmt.Sprintf(`CREATE FUNCTION %s.gate() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF NEW.instance = 'slow' THEN PERFORM pg_advisory_xact_lock_shared(%d); END IF;
				RETURN NEW;
			END $$`, schema, lockKey),
		fmt.Sprintf(`CREATE TRIGGER gate AFTER UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION %s.gate()`, b.tLeases, schema),
		fmt.Sprintf(`SELECT pg_advisory_lock(%d)`, lockKey),
	} {
		if _, err := ctl.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	locked := true
	defer func() {
		if locked {
			_, _ = ctl.Exec(ctx, fmt.Sprintf(`SELECT pg_advisory_unlock(%d)`, lockKey))
		}
	}()

	// The renewal, sent while the lease is live, judges it live, updates
	// the row and waits in the trigger, uncommitted.
	type result struct {
		g   backend.Grant
		err error
	}
	renewed := make(chan result, 1)
	go func() {
		g, err := b.Renew(ctx, backend.RenewRequest{Key: "k", Owner: holder, Token: g.Token, TTL: 20 * ttl})
		renewed <- result{g, err}
	}()
	waitForPG(t, ctl, `SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`)

	// The old expiry passes, by the server's clock, while the renewal is
	// not committed (a plain read sees the old row version).
	waitForPG(t, ctl, `SELECT expires_at <= clock_timestamp() FROM `+b.tLeases+` WHERE key = 'k'`)
	// A Get now: it answers at once (a snapshot read) or waits for the
	// renewal's row lock; either way it is let go below.
	type read struct {
		l   backend.Lease
		err error
	}
	got := make(chan read, 1)
	go func() {
		l, err := b.Get(ctx, "k")
		got <- read{l, err}
	}()
	var first *read
	for end := time.Now().Add(10 * time.Second); first == nil && time.Now().Before(end); {
		select {
		case r := <-got:
			first = &r
		case <-time.After(5 * time.Millisecond):
			var waiting bool
			if err := ctl.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted`).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			if waiting {
				end = time.Time{}
			}
		}
	}
	if first == nil {
		t.Log("Get waits for the uncommitted renewal")
	}

	// Exclusion holds: another owner's Acquire waits for the renewal's row
	// lock and then sees the renewed lease.
	acquired := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx, "k", backend.Owner{Instance: "other", Nonce: backend.NewNonce()}, ttl)
		acquired <- err
	}()
	waitForPG(t, ctl, `SELECT count(*) > `+map[bool]string{true: "0", false: "1"}[first != nil]+` FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted`)

	if _, err := ctl.Exec(ctx, fmt.Sprintf(`SELECT pg_advisory_unlock(%d)`, lockKey)); err != nil {
		t.Fatal(err)
	}
	locked = false
	if first == nil {
		r := <-got
		first = &r
	}
	getErr := first.err
	t.Logf("Get while the renewal is uncommitted, after the old expiry: %+v, %v", first.l, getErr)
	r := <-renewed
	t.Logf("Renew: %+v, %v", r.g, r.err)
	var he *backend.HeldError
	if err := <-acquired; !errors.As(err, &he) || he.Holder.Token != g.Token {
		t.Errorf("another owner's Acquire during the renewal's commit gap: %v, want Held by token %d", err, g.Token)
	}
	after, afterErr := b.Get(ctx, "k")
	t.Logf("Get after the renewal committed: %+v, %v", after, afterErr)

	if errors.Is(getErr, backend.ErrNotFound) && r.err == nil && afterErr == nil && after.Token == g.Token {
		t.Fatalf("Get answered NotFound (the lease expired), then Renew of the same grant (token %d) answered OK and Get names it again: a lease read as expired came back", g.Token)
	}
}

// waitForPG polls q (a boolean query) on c until it is true, for up to 10 s.
func waitForPG(t *testing.T, c *pgx.Conn, q string) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		var ok bool
		if err := c.QueryRow(context.Background(), q).Scan(&ok); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if ok {
			return
		}
	}
	t.Fatalf("%s: still false after 10 s", q)
}
