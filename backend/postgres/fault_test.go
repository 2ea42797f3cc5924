package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// retry runs fn until it succeeds or 60s pass, for calls made while the
// pool reconnects after a server restart.
func retry(t *testing.T, what string, fn func() error) { faultkit.Retry(t, 60*time.Second, what, fn) }

// TestRestartKeepsTokens crashes a private server (SIGKILL) while a lease is
// held, starts it again (WAL recovery) and checks that the lease and the
// counter survived: the holder still holds its token, and the next grant's
// token is greater.
func TestRestartKeepsTokens(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	b, err := Open(ctx, testserver.PostgresServerURL(srv), WithSchema("restart"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !b.Capabilities().DurableFencing {
		t.Fatalf("private server: DurableFencing false, want true (fsync and synchronous_commit on)")
	}
	a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	var last uint64
	for range 5 { // some history on the key
		g, err := b.Acquire(ctx, "r/k", a, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		last = g.Token
		if err := b.Release(ctx, "r/k", a, g.Token); err != nil {
			t.Fatal(err)
		}
	}
	held, err := b.Acquire(ctx, "r/k", a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if held.Token <= last {
		t.Fatalf("token %d not greater than %d", held.Token, last)
	}
	srv.Kill()
	srv.Start()
	var l backend.Lease
	retry(t, "Get after restart", func() error { l, err = b.Get(ctx, "r/k"); return err })
	if l.Owner != a || l.Token != held.Token {
		t.Fatalf("after the restart the lease is %+v, want owner a with token %d", l, held.Token)
	}
	_, err = b.Acquire(ctx, "r/k", backend.Owner{Instance: "b", Nonce: backend.NewNonce()}, time.Minute)
	if !errors.Is(err, backend.ErrLeaseHeld) {
		t.Fatalf("Acquire of the held key after restart: %v, want ErrLeaseHeld", err)
	}
	if err := b.Release(ctx, "r/k", a, held.Token); err != nil {
		t.Fatal(err)
	}
	g, err := b.Acquire(ctx, "r/k", backend.Owner{Instance: "b", Nonce: backend.NewNonce()}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if g.Token <= held.Token {
		t.Fatalf("token after restart %d not greater than %d", g.Token, held.Token)
	}
}

// TestFenceRejectsStaleHolder: a holder whose lease expired and was taken
// over cannot write through Fence; the current holder can; and while a
// fenced transaction is open, a new grant waits for it.
func TestFenceRejectsStaleHolder(t *testing.T) {
	b := openTest(t)
	defer b.Close()
	ctx := context.Background()
	if _, err := b.Pool().Exec(ctx, `CREATE TABLE `+b.Schema()+`.sink (token bigint)`); err != nil {
		t.Fatal(err)
	}
	write := func(key string, token uint64) error {
		return pgx.BeginFunc(ctx, b.Pool(), func(tx pgx.Tx) error {
			if err := b.Fence(ctx, tx, key, token); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+b.Schema()+`.sink VALUES ($1)`, int64(token))
			return err
		})
	}
	a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	ga, err := b.Acquire(ctx, "f/k", a, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := write("f/k", ga.Token); err != nil {
		t.Fatalf("fenced write by the holder: %v", err)
	}
	c := backend.Owner{Instance: "c", Nonce: backend.NewNonce()}
	var gc backend.Grant
	retry(t, "Acquire after a's lease expired", func() error { gc, err = b.Acquire(ctx, "f/k", c, time.Minute); return err })
	if err := write("f/k", ga.Token); !errors.Is(err, ErrLeaseFenced) || !errors.Is(err, backend.ErrLeaseLost) {
		t.Fatalf("fenced write by the stale holder: %v, want ErrLeaseFenced", err)
	}
	if err := write("f/k", gc.Token); err != nil {
		t.Fatalf("fenced write by the new holder: %v", err)
	}
	var n int
	if err := b.Pool().QueryRow(ctx, `SELECT count(*) FROM `+b.Schema()+`.sink WHERE token = $1`, int64(ga.Token)).Scan(&n); err != nil || n != 1 {
		t.Fatalf("sink has %d rows of the stale token (%v), want only the one written while it held", n, err)
	}

	// While c's fenced transaction is open, a takeover waits for it.
	tx, err := b.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := b.Fence(ctx, tx, "f/k", gc.Token); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := b.Release(short, "f/k", c, gc.Token); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Release while a fenced transaction holds the row: %v, want it to wait (deadline exceeded)", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The timed-out Release may still be applied once the row is free (an
	// ambiguous outcome): "lease lost" then means released.
	if err := b.Release(ctx, "f/k", c, gc.Token); err != nil && !errors.Is(err, backend.ErrLeaseLost) {
		t.Fatalf("Release after the fenced transaction ended: %v", err)
	}
	if _, err := b.Get(ctx, "f/k"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Get after Release: %v, want ErrNotFound", err)
	}
}

// TestFencedTransactionLeftOpenEndsWithTheLease: a holder stopped (SIGSTOP,
// a stall) inside a fenced transaction must not keep the lease's row
// locked past the lease: the next holder gets the key once it expired, and
// the stopped holder's write is never committed. (The conformance
// PausedHolder scenario caught it: a SIGSTOP that landed inside the
// helper's fenced write kept every later Acquire waiting.)
func TestFencedTransactionLeftOpenEndsWithTheLease(t *testing.T) {
	b := openTest(t)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := b.Pool().Exec(ctx, `CREATE TABLE `+b.Schema()+`.sink (token bigint)`); err != nil {
		t.Fatal(err)
	}
	const ttl = 500 * time.Millisecond
	a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	ga, err := b.Acquire(ctx, "f/open", a, ttl)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := b.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if err := b.Fence(ctx, tx, "f/open", ga.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+b.Schema()+`.sink VALUES ($1)`, int64(ga.Token)); err != nil {
		t.Fatal(err)
	}
	// The holder stops here, its transaction open. The next holder waits
	// at most for the lease to expire, plus slack for a loaded host.
	c := backend.Owner{Instance: "c", Nonce: backend.NewNonce()}
	wait, cancelWait := context.WithTimeout(ctx, ttl+5*time.Second)
	defer cancelWait()
	var gc backend.Grant
	for {
		gc, err = b.Acquire(wait, "f/open", c, time.Minute)
		if err == nil {
			break
		}
		if !errors.Is(err, backend.ErrLeaseHeld) {
			t.Fatalf("Acquire by the next holder while the stopped holder's fenced transaction is open: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if gc.Token <= ga.Token {
		t.Fatalf("next token %d not greater than %d", gc.Token, ga.Token)
	}
	// Resumed, the stopped holder's commit must not go through.
	if err := tx.Commit(ctx); err == nil {
		t.Fatalf("the stopped holder's fenced transaction committed after the next holder (token %d) got the lease", gc.Token)
	}
	var n int
	if err := b.Pool().QueryRow(ctx, `SELECT count(*) FROM `+b.Schema()+`.sink`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("sink has %d rows (%v), want none: the stale write must not be committed", n, err)
	}
}
