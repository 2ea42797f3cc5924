package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestWaitSeesReleaseBeforeWait: a release between a waiter's failed
// Acquire and its Wait is not missed (the holder is read after LISTEN).
func TestWaitSeesReleaseBeforeWait(t *testing.T) {
	b := openTest(t)
	defer b.Close()
	ctx := context.Background()
	a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	w := backend.Owner{Instance: "w", Nonce: backend.NewNonce()}
	for i := range 20 {
		g, err := b.Acquire(ctx, "n/k", a, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Acquire(ctx, "n/k", w, time.Minute); !errors.Is(err, backend.ErrLeaseHeld) {
			t.Fatalf("round %d: %v, want ErrLeaseHeld", i, err)
		}
		if err := b.Release(ctx, "n/k", a, g.Token); err != nil { // before Wait
			t.Fatal(err)
		}
		ch, err := b.Wait(ctx, "n/k")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: a release before Wait was missed", i)
		}
	}
}

// TestWaitFiresOnExpiryAndCancel: the channel closes when the lease expires
// by the server's clock, and when the waiter's context ends.
func TestWaitFiresOnExpiryAndCancel(t *testing.T) {
	b := openTest(t)
	defer b.Close()
	ctx := context.Background()
	a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	if _, err := b.Acquire(ctx, "n/exp", a, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ch, err := b.Wait(ctx, "n/exp")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up at expiry")
	}
	if _, err := b.Get(ctx, "n/exp"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("woken at expiry but the server still sees a lease: %v", err)
	}
	if _, err := b.Acquire(ctx, "n/held", a, time.Minute); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	ch, err = b.Wait(cctx, "n/held")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up when the context ended")
	}
}

// TestWaitRacesRelease: Wait and Release run at the same moment, 50 times;
// whichever commits first, the waiter wakes well before the lease's minute
// would expire (no lost wake-up between the registration in the lease row
// and the release's decision to NOTIFY).
func TestWaitRacesRelease(t *testing.T) {
	b := openTest(t)
	defer b.Close()
	ctx := context.Background()
	a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	for i := range 50 {
		g, err := b.Acquire(ctx, "n/race", a, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		relErr := make(chan error, 1)
		go func() {
			<-start
			relErr <- b.Release(ctx, "n/race", a, g.Token)
		}()
		close(start)
		ch, err := b.Wait(ctx, "n/race")
		if err != nil {
			t.Fatal(err)
		}
		if err := <-relErr; err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the waiter was not woken by a release racing its Wait", i)
		}
	}
}

// TestReleaseNotifiesOnlyWaitedKeys: a raw LISTEN connection sees the
// NOTIFYs in commit order. A release that nobody waits for, followed by one
// that a waiter registered for, must deliver the waited key's notification
// first: the unwaited release sent none.
func TestReleaseNotifiesOnlyWaitedKeys(t *testing.T) {
	b := openTest(t)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := b.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw := conn.Hijack()
	defer raw.Close(context.Background())
	if _, err := raw.Exec(ctx, "LISTEN "+b.channel); err != nil {
		t.Fatal(err)
	}
	a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	quiet, err := b.Acquire(ctx, "n/quiet", a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waited, err := b.Acquire(ctx, "n/waited", a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := b.Wait(ctx, "n/waited")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "n/quiet", a, quiet.Token); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "n/waited", a, waited.Token); err != nil {
		t.Fatal(err)
	}
	msg, err := raw.WaitForNotification(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Payload != "n/waited" {
		t.Fatalf("first notification is for %q, want n/waited (a release nobody waited for sent a NOTIFY)", msg.Payload)
	}
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal("the waiter was not woken")
	}
}

// TestMigrateV1ToV2: tables made by schema version 1 (no wake_until) are
// upgraded by the next Open, and Wait works on them.
func TestMigrateV1ToV2(t *testing.T) {
	b := openTest(t)
	ctx := context.Background()
	if _, err := b.Pool().Exec(ctx, `ALTER TABLE `+b.tLeases+` DROP COLUMN wake_until`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pool().Exec(ctx, `UPDATE `+b.tMeta+` SET value = 1 WHERE name = 'schema_version'`); err != nil {
		t.Fatal(err)
	}
	b.Close()
	b, err := Open(ctx, testserver.PostgresURL(t), WithSchema(b.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var v int
	if err := b.Pool().QueryRow(ctx, `SELECT value FROM `+b.tMeta+` WHERE name = 'schema_version'`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != schemaVersion {
		t.Fatalf("schema version %d after Open, want %d", v, schemaVersion)
	}
	a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	g, err := b.Acquire(ctx, "m/k", a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := b.Wait(ctx, "m/k")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "m/k", a, g.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after the migration")
	}
}

// TestWaitReturnsByItsContextWhileAnotherConnects: the first Wait connects
// the LISTEN connection; while it waits for a pool connection (the pool is
// exhausted), a second Wait with a short context returns when that context
// ends, instead of queueing behind the first's connect for as long as the
// first's context allows.
func TestWaitReturnsByItsContextWhileAnotherConnects(t *testing.T) {
	u, schema := freshSchema(t)
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	b, err := Open(context.Background(), u+sep+"pool_max_conns=1", WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	held, err := b.pool.Acquire(context.Background()) // the pool's only connection
	if err != nil {
		t.Fatal(err)
	}
	acquiring := make(chan struct{}, 1)
	b.n.acquiring = func() {
		select {
		case acquiring <- struct{}{}:
		default:
		}
	}
	first, cancelFirst := context.WithCancel(context.Background())
	firstDone := make(chan error, 1)
	go func() {
		_, err := b.Wait(first, "k")
		firstDone <- err
	}()
	defer func() { cancelFirst(); <-firstDone; held.Release() }()
	select {
	case <-acquiring: // the first Wait is taking a connection; the pool has none
	case <-time.After(10 * time.Second):
		t.Fatal("the first Wait never asked the pool for a connection")
	}
	second, cancelSecond := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelSecond()
	secondDone := make(chan error, 1)
	go func() {
		_, err := b.Wait(second, "k")
		secondDone <- err
	}()
	select {
	case err := <-secondDone:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("second Wait: %v, want its context's deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second Wait did not return by its context: it queued behind the first's connect")
	}
}
