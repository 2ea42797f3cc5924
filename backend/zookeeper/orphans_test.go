package zookeeper_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/zookeeper"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// Orphans: nodes this backend created (or may have created) whose caller
// no longer knows of them. Each must be deleted or carry a TTL timer; none
// may live as long as the session (issue 14 items 2, 3, 4, 6).

// cutOff returns a backend reaching a fresh server through a chaos proxy
// with the given session timeout, and a backend on the same prefix that
// reaches it directly.
func cutOff(t *testing.T, session time.Duration) (p *chaos.Proxy, proxied, direct *zookeeper.Backend) {
	t.Helper()
	srv := testserver.ZooKeeper(t)
	p, err := chaos.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	proxied = open(t, p.Addr(), session)
	direct = open(t, srv.Addr(), 10*time.Second, proxied.Prefix())
	return p, proxied, direct
}

// ownNodes lists the nodes of key's queue that carry owner's protected name.
func ownNodes(t *testing.T, b *zookeeper.Backend, key string, owner backend.Owner) []string {
	t.Helper()
	names, _, err := b.Conn().Children(b.Prefix() + "/locks/k" + url.QueryEscape(key))
	if err != nil && !strings.Contains(err.Error(), "node does not exist") {
		t.Fatalf("list the queue of %q: %v", key, err)
	}
	var out []string
	for _, n := range names {
		if strings.Contains(n, owner.Nonce.String()) {
			out = append(out, n)
		}
	}
	return out
}

// acquireWithin retries a try Acquire on b by fresh owners until one is
// granted, failing the test after within.
func acquireWithin(t *testing.T, b *zookeeper.Backend, key string, within time.Duration, why string) backend.Grant {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within+10*time.Second)
	defer cancel()
	var (
		o   backend.Owner
		g   backend.Grant
		err error
	)
	if !eventually.Within(within, func() bool {
		o = backend.Owner{Instance: "next", Nonce: backend.NewNonce()}
		g, err = b.Acquire(ctx, key, o, 5*time.Second)
		return err == nil
	}) {
		t.Fatalf("%s: key %q still not acquirable %v later: %v", why, key, within, err)
	}
	t.Cleanup(func() { _ = b.Release(context.Background(), key, o, g.Token) })
	return g
}

// outage holds the black hole for d: the fault's length is the scenario.
func outage(p *chaos.Proxy, d time.Duration) {
	p.SetDrop(true)
	time.Sleep(d)
	p.SetDrop(false)
	p.CloseConns()
}

// TestLostLockDeletedAfterShortOutage (item 2): the holder's connection is
// cut across its lock's TTL instant for less than the session timeout, so
// the session survives and the client reconnects to it. The TTL deletion
// must go on until the node is gone: another owner acquires soon after.
func TestLostLockDeletedAfterShortOutage(t *testing.T) {
	t.Parallel()
	p, holder, direct := cutOff(t, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key, ttl = "default:lock:svc/outage", time.Second
	o := backend.Owner{Instance: "holder", Nonce: backend.NewNonce()}
	session := holder.Conn().SessionID()
	if _, err := holder.Acquire(ctx, key, o, ttl); err != nil {
		t.Fatal(err)
	}
	// 2 s: past the TTL, within the client's receive timeout (6.7 s) and
	// the session timeout (10 s).
	outage(p, 2*ttl)
	acquireWithin(t, direct, key, 5*time.Second, "after a 2 s outage across a 1 s TTL")
	if s := holder.Conn().SessionID(); s != session {
		t.Fatalf("the holder's session changed (%x -> %x): the scenario needs it to survive", session, s)
	}
}

// TestIndeterminateTryLeavesNoWaiter (item 3): a try Acquire behind a
// holder whose create was applied but whose reply never came leaves a
// waiter node the caller does not know of. It must be deleted or timed: when
// the holder releases, the key is free within the TTL, not held by the
// phantom for the session's life.
func TestIndeterminateTryLeavesNoWaiter(t *testing.T) {
	t.Parallel()
	p, tryer, direct := cutOff(t, 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key, ttl = "default:lock:svc/phantom", time.Second
	h := backend.Owner{Instance: "holder", Nonce: backend.NewNonce()}
	hg, err := direct.Acquire(ctx, key, h, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	o := backend.Owner{Instance: "tryer", Nonce: backend.NewNonce()}
	p.SetDelay(3 * time.Second) // replies outlast the 2 s receive timeout
	_, err = tryer.Acquire(ctx, key, o, ttl)
	var held *backend.HeldError
	if err == nil || errors.As(err, &held) {
		t.Fatalf("Acquire with its replies cut: got %v, want an unknown outcome", err)
	}
	if n := ownNodes(t, direct, key, o); len(n) != 1 {
		t.Fatalf("the unanswered create left %v, want one waiter node (the scenario)", n)
	}
	p.SetDelay(0)
	p.CloseConns()
	// The caller gives up (as the Locker's cleanup does, it sees another
	// holder and releases nothing); the holder releases.
	if err := direct.Release(ctx, key, h, hg.Token); err != nil {
		t.Fatal(err)
	}
	acquireWithin(t, direct, key, ttl+5*time.Second, "after an indeterminate try behind a holder")
}

// TestRetriedClaimIsYours (item 4): a claim applied whose reply was lost,
// retried with the same owner nonce, is answered with the same grant; and
// if the runner then goes silent, its lease ends after the TTL, so the
// occurrence can be reclaimed.
func TestRetriedClaimIsYours(t *testing.T) {
	t.Parallel()
	p, runner, direct := cutOff(t, 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	at := time.Now().Truncate(time.Second)
	req := backend.ClaimRequest{Job: "retried", ScheduledAt: at, SpecVersion: "v1",
		Owner: backend.Owner{Instance: "runner", Nonce: backend.NewNonce()}, TTL: 3 * time.Second, MaxEarly: time.Minute}
	// Another occurrence first, so that the job's nodes exist and the
	// claim below is two reads and the multi-op.
	first := req
	first.ScheduledAt = at.Add(-time.Second)
	if _, err := runner.Claim(ctx, first); err != nil {
		t.Fatal(err)
	}
	// Replies held back 1.5 s (within the 2 s receive timeout): once the
	// run record is seen, the claim's reply is still in the proxy, and
	// closing the connections loses it.
	p.SetDelay(1500 * time.Millisecond)
	claimed := make(chan error, 1)
	go func() { _, err := runner.Claim(ctx, req); claimed <- err }()
	var run backend.Run
	var err error
	if !eventually.Within(20*time.Second, func() bool {
		run, err = direct.GetRun(ctx, req.Job, at)
		return err == nil
	}) {
		t.Fatalf("the claim was not applied within 20s: %v", err)
	}
	p.CloseConns()
	p.SetDelay(0)
	if err := <-claimed; err == nil {
		t.Fatal("Claim whose reply was lost succeeded; the scenario needs an unknown outcome")
	}
	if run.Owner != req.Owner {
		t.Fatalf("the applied claim's owner is %v, want %v", run.Owner, req.Owner)
	}
	var g backend.Grant
	eventually.Within(10*time.Second, func() bool { // failures while reconnecting: again
		g, err = runner.Claim(ctx, req)
		return err == nil || errors.Is(err, backend.ErrLeaseLost) || errors.Is(err, backend.ErrOccurrenceClaimed)
	})
	if err != nil {
		t.Fatalf("retried Claim with the same nonce: %v, want the applied claim's grant", err)
	}
	if g.Token != run.Token {
		t.Fatalf("retried Claim answered token %d, want the applied claim's %d", g.Token, run.Token)
	}
	// The runner goes silent: no Heartbeat. Its lease must end.
	if !eventually.Within(g.TTL+5*time.Second, func() bool {
		run, err = direct.GetRun(ctx, req.Job, at)
		return err == nil && run.Expired
	}) {
		t.Fatalf("runner's lease not expired %v after its TTL %v: %+v, %v", 5*time.Second, g.TTL, run, err)
	}
	next := req
	next.Owner = backend.Owner{Instance: "next", Nonce: backend.NewNonce()}
	if g2, _, err := direct.Reclaim(ctx, next); err != nil || g2.Token <= g.Token {
		t.Fatalf("Reclaim after the silent runner's TTL: token %d, %v (want > %d)", g2.Token, err, g.Token)
	}
}

// TestCloseDuringAcquireIsIndeterminate (item 6): the backend is closed
// while an Acquire's create was applied but unanswered (a try, and a
// blocking Acquire that waits in line). The Locker must report
// ErrIndeterminate, not a plain ErrClosed; and closing the session deletes
// the ephemeral node, which is the orphan cleanup (a closed client can send
// nothing else).
func TestCloseDuringAcquireIsIndeterminate(t *testing.T) {
	t.Parallel()
	for _, blocking := range []bool{false, true} {
		name := map[bool]string{false: "TryAcquire", true: "Acquire"}[blocking]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			closeDuringAcquire(t, blocking)
		})
	}
}

func closeDuringAcquire(t *testing.T, blocking bool) {
	p, closing, direct := cutOff(t, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "svc/closing"
	bkey := "default:lock:" + key
	lk, err := leasehold.NewLocker(closing, leasehold.WithInstance("closing"), leasehold.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p.SetDelay(2 * time.Second)
	got := make(chan error, 1)
	go func() {
		acquire := lk.TryAcquire
		if blocking {
			acquire = lk.Acquire
		}
		l, err := acquire(ctx, key)
		if l != nil {
			_ = l.Release(ctx)
		}
		got <- err
	}()
	// Wait for the create to be applied (its reply is held back).
	eventually.True(t, 10*time.Second, "the create reached the server", func() bool {
		names, _, _ := direct.Conn().Children(direct.Prefix() + "/locks/k" + url.QueryEscape(bkey))
		return len(names) == 1
	})
	if err := closing.Close(); err != nil {
		t.Fatal(err)
	}
	err = <-got
	if !errors.Is(err, leasehold.ErrOutcomeIndeterminate) {
		t.Fatalf("%v closed in flight: want ErrIndeterminate", err)
	}
	// The closed session's ephemeral node is gone: the key is free.
	acquireWithin(t, direct, bkey, 2*time.Second, "after the backend was closed")
}
