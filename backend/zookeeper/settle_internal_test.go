package zookeeper

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// Races between a grant and this backend's own background cleanup of an
// owner's nodes, put in order through the package's hooks (hooks.go) on a
// real server. The cleanup paths list the owner's nodes by their protected
// name, which a retry's node carries too.

// openHooked opens a backend on addr under prefix with the given session
// timeout and hooks, closed at the end of the test.
func openHooked(t *testing.T, addr, prefix string, session time.Duration, h hooks) *Backend {
	t.Helper()
	// A generous connect bound: a fresh JVM on a loaded host is slow.
	b, err := OpenConfig(context.Background(), Config{Servers: []string{addr}, Prefix: prefix,
		SessionTimeout: session, ConnectTimeout: 30 * time.Second, hooks: h})
	if err != nil {
		t.Fatalf("OpenConfig: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// gate holds the nth call through it until the test opens it, and tells
// the test that call's argument; other calls pass at once. passed reports
// that the held call went on.
type gate struct {
	n       int32
	calls   atomic.Int32
	reached chan string
	opened  chan struct{}
	passed  atomic.Bool
}

// newGate returns a gate that holds the first call.
func newGate() *gate { return newGateAt(1) }

// newGateAt returns a gate that holds the nth call.
func newGateAt(n int32) *gate {
	return &gate{n: n, reached: make(chan string, 1), opened: make(chan struct{})}
}

func (g *gate) pass(arg string) {
	if g.calls.Add(1) == g.n {
		g.reached <- arg
		<-g.opened
		g.passed.Store(true)
	}
}

// wait returns the argument of the held call, failing t if none comes
// within d.
func (g *gate) wait(t *testing.T, d time.Duration, what string) string {
	t.Helper()
	select {
	case a := <-g.reached:
		return a
	case <-time.After(d):
		t.Fatalf("%s: not reached within %v", what, d)
		return ""
	}
}

func (g *gate) open() { close(g.opened) }

// gone reports that path does not exist, as b reads it.
func gone(b *Backend, path string) bool {
	ok, _, err := b.conn.Exists(path)
	return err == nil && !ok
}

// cutAttempt makes a try Acquire of owner on key whose create is never
// answered (the proxy drops everything until the client's receive timeout
// ends the call): its outcome is unknown to the backend, which marks the
// owner unsure and starts settling its nodes. The call takes longer than
// ttl, so the deadline settle times the owner's nodes by has passed.
func cutAttempt(t *testing.T, p *chaos.Proxy, b *Backend, key string, owner backend.Owner, ttl time.Duration) {
	t.Helper()
	p.SetDrop(true)
	sent := time.Now()
	_, err := b.Acquire(context.Background(), key, owner, ttl)
	p.SetDrop(false)
	p.CloseConns()
	var held *backend.HeldError
	if err == nil || errors.As(err, &held) || errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Acquire with every request dropped: %v, want an unknown outcome", err)
	}
	if took := time.Since(sent); took < ttl {
		t.Fatalf("the cut attempt ended after %v, within its TTL %v: the scenario needs its deadline past", took, ttl)
	}
	eventually.True(t, 20*time.Second, "the cut-off client reconnects to its session", func() bool {
		return b.conn.State() == zk.StateHasSession
	})
}

// grantHeld checks that g, answered to owner on key for a request sent at
// sent, is a grant the server holds until sent + g.TTL: the key's holder is
// owner with g's token, and a try by another owner is refused.
func grantHeld(t *testing.T, direct *Backend, key string, owner backend.Owner, g backend.Grant, sent time.Time, what string) {
	t.Helper()
	ctx := context.Background()
	defer func() {
		if time.Now().After(sent.Add(g.TTL)) {
			t.Fatalf("%s: the check ended after the grant's deadline (%v after its send time): nothing to judge; this host was too slow", what, g.TTL)
		}
	}()
	l, err := direct.Get(ctx, key)
	if err != nil || l.Token != g.Token || l.Owner != owner {
		t.Errorf("%s answered OK (token %d) but the key reads %+v, %v: a grant of a node that does not exist", what, g.Token, l, err)
	}
	other := backend.Owner{Instance: "other", Nonce: backend.NewNonce()}
	og, err := direct.Acquire(ctx, key, other, 10*time.Second)
	if err == nil {
		t.Fatalf("two grants: %s answered token %d with TTL %v, and another owner is granted token %d at once", what, g.Token, g.TTL, og.Token)
	}
	var held *backend.HeldError
	if !errors.As(err, &held) || held.Holder.Token != g.Token {
		t.Fatalf("another owner's try after %s (token %d): %v, want held by that grant", what, g.Token, err)
	}
}

// TestRetryNotGrantedANodeSettleDeleted: a try Acquire's create goes
// unanswered, so the backend settles the owner's nodes in the background,
// timed by that attempt's deadline, which has passed. The caller retries
// with the same owner: it lists (nothing: the cut create never arrived),
// creates a node and lists it lowest. Before the retry arms and grants it,
// settle lists the owner's nodes, finds the retry's node untimed and times
// it by the past deadline: its timer deletes it. The retry must not answer
// OK for the deleted node: that is a grant nobody holds on the server, and
// the next owner is granted too (the chaos run kept in
// internal/chaos/checker/testdata/zookeeper-nonlinearizable).
func TestRetryNotGrantedANodeSettleDeleted(t *testing.T) {
	t.Parallel()
	srv := testserver.ZooKeeper(t)
	p, err := chaos.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	settleAt, grantAt := newGate(), newGate()
	tryer := openHooked(t, p.Addr(), "/t", 4*time.Second, hooks{
		settleList:  func(string, backend.Owner) { settleAt.pass("") },
		beforeGrant: grantAt.pass,
	})
	direct := openHooked(t, srv.Addr(), "/t", 10*time.Second, hooks{})
	ctx := context.Background()
	const key, ttl = "svc/settled", time.Second
	// The key's queue exists: the cut attempt's first request is its create.
	first := backend.Owner{Instance: "first", Nonce: backend.NewNonce()}
	fg, err := direct.Acquire(ctx, key, first, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := direct.Release(ctx, key, first, fg.Token); err != nil {
		t.Fatal(err)
	}

	owner := backend.Owner{Instance: "tryer", Nonce: backend.NewNonce()}
	cutAttempt(t, p, tryer, key, owner, ttl)
	settleAt.wait(t, 10*time.Second, "settle's first listing")

	type result struct {
		g   backend.Grant
		err error
	}
	retried := make(chan result, 1)
	go func() {
		for {
			g, err := tryer.Acquire(ctx, key, owner, ttl)
			if err == nil || grantAt.passed.Load() {
				retried <- result{g, err}
				return
			}
			time.Sleep(20 * time.Millisecond) // failed before its grant (reconnecting): again
		}
	}()
	path := grantAt.wait(t, 20*time.Second, "the retry lists its node lowest")
	settleAt.open()
	eventually.True(t, 10*time.Second, "settle times the retry's node by the past deadline, and its timer deletes it", func() bool {
		return gone(direct, path)
	})
	grantAt.open()
	r := <-retried
	if r.err == nil {
		// Judged at the answer: the node was gone before the grant went
		// on, so the grant was never held. Another owner's try shows it.
		og, oerr := direct.Acquire(ctx, key, backend.Owner{Instance: "other", Nonce: backend.NewNonce()}, ttl)
		t.Fatalf("the retry answered OK (token %d, TTL %v) for its node %s, which was gone before the answer; another owner's try then: token %d, %v",
			r.g.Token, r.g.TTL, path, og.Token, oerr)
	}
	if !errors.Is(r.err, backend.ErrLeaseLost) {
		t.Fatalf("the retry whose node settle deleted: %v, want ErrLeaseLost", r.err)
	}
	t.Logf("the retry was refused: %v", r.err)
	// A further retry is granted a node that exists.
	var (
		g    backend.Grant
		sent time.Time
	)
	eventually.True(t, 20*time.Second, "a further retry is granted", func() bool {
		sent = time.Now()
		g, err = tryer.Acquire(ctx, key, owner, 4*time.Second)
		return err == nil
	})
	grantHeld(t, direct, key, owner, g, sent, "the further retry")
}

// ownerNodes lists the nodes of key's queue that carry owner's protected
// name, as b reads them.
func ownerNodes(t *testing.T, b *Backend, key string, owner backend.Owner) []string {
	t.Helper()
	names, _, err := b.conn.Children(b.prefix + "/locks/k" + url.QueryEscape(key))
	if err != nil && err != zk.ErrNoNode {
		t.Fatalf("list the queue of %q: %v", key, err)
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, nodeName(owner)) {
			out = append(out, n)
		}
	}
	return out
}

// TestBackgroundWithdrawalSparesARetrysGrant: a blocking AcquireQueued whose
// create was applied but never answered gives up (its context ends) while
// the server cannot be reached, so it cannot confirm that it left the
// queue: it withdraws in the background, by the owner's protected name (it
// does not know its node's). The caller retries with the same owner, a try
// Acquire: it lists first, finds the node the create left, lowest, and is
// granted it ("yours"). The background withdrawal must not then delete the
// node under that grant — a grant nobody holds on the server, and the next
// owner granted too.
func TestBackgroundWithdrawalSparesARetrysGrant(t *testing.T) {
	t.Parallel()
	srv := testserver.ZooKeeper(t)
	p, err := chaos.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	withdrawAt := newGateAt(2) // the first attempt in the background
	results := make(chan bool, 16)
	q := openHooked(t, p.Addr(), "/t", 10*time.Second, hooks{
		withdrawList: func(string, backend.Owner) func(bool) {
			withdrawAt.pass("")
			return func(left bool) { results <- left }
		},
	})
	direct := openHooked(t, srv.Addr(), "/t", 10*time.Second, hooks{})
	bg := context.Background()
	const key, ttl = "svc/withdrawn", 10 * time.Second
	// The key's queue exists: the queued call's first request is its create.
	first := backend.Owner{Instance: "first", Nonce: backend.NewNonce()}
	fg, err := direct.Acquire(bg, key, first, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := direct.Release(bg, key, first, fg.Token); err != nil {
		t.Fatal(err)
	}

	owner := backend.Owner{Instance: "queued", Nonce: backend.NewNonce()}
	p.SetDelay(1500 * time.Millisecond) // within the 6.7 s receive timeout
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	queued := make(chan error, 1)
	go func() { _, _, err := q.AcquireQueued(ctx, key, owner, ttl); queued <- err }()
	eventually.True(t, 20*time.Second, "the queued create is applied", func() bool {
		return len(ownerNodes(t, direct, key, owner)) == 1
	})
	// Its reply is still in the proxy: lost, and no new connection is let
	// in until the withdrawal has failed once.
	cancel()
	p.SetRefuse(true)
	p.CloseConns()
	withdrawAt.wait(t, 30*time.Second, "the withdrawal in the background")
	select {
	case err := <-queued:
		if err == nil || errors.Is(err, backend.ErrNotApplied) {
			t.Fatalf("AcquireQueued cut off as it gave up: %v, want an unconfirmed withdrawal", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("AcquireQueued did not return within 20s of its withdrawal going to the background")
	}
	if left := <-results; left {
		t.Fatal("the first withdrawal was confirmed while the server was cut off: the scenario needs it unconfirmed")
	}
	p.SetRefuse(false)
	p.SetDelay(0)
	eventually.True(t, 20*time.Second, "the cut-off client reconnects to its session", func() bool {
		return q.conn.State() == zk.StateHasSession
	})

	var (
		g    backend.Grant
		sent time.Time
	)
	eventually.True(t, 20*time.Second, "the retry with the same owner is granted", func() bool {
		sent = time.Now()
		g, err = q.Acquire(bg, key, owner, ttl)
		return err == nil
	})
	withdrawAt.open()
	for done := time.After(20 * time.Second); ; {
		select {
		case left := <-results:
			if !left {
				continue // failed again: the background goes on
			}
		case <-done:
			t.Fatal("the background withdrawal did not end within 20s of the server being reachable")
		}
		break
	}
	grantHeld(t, direct, key, owner, g, sent, "the retry granted while its owner's withdrawal went on in the background")
}
