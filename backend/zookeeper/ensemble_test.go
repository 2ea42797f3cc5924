package zookeeper_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/zookeeper"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestEnsembleRetryReadsNoStaleFollower (issue 14 item 5): on a 3-server
// ensemble, a client on a follower holds a key; the follower is cut off from
// the leader (it keeps serving its clients from its own state until it
// gives the leader up, syncLimit later); meanwhile the node is deleted
// through the leader and another owner acquires. The holder's retried
// Acquire must not be answered "yours" from the follower's stale state.
func TestEnsembleRetryReadsNoStaleFollower(t *testing.T) {
	e := testserver.ZooKeeperEnsemble3(t)
	leader := e.WaitServing(t, 30*time.Second)
	if leader < 0 {
		t.Fatal("no leader")
	}
	f := (leader + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	onFollower := open(t, e.Members[f].Addr(), 10*time.Second)
	onLeader := open(t, e.Members[leader].Addr(), 10*time.Second, onFollower.Prefix())
	const key, ttl = "svc/ensemble", 5 * time.Second
	o := backend.Owner{Instance: "holder", Nonce: backend.NewNonce()}
	g, err := onFollower.Acquire(ctx, key, o, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := onFollower.Acquire(ctx, key, o, ttl); err != nil || again.Token != g.Token {
		t.Fatalf("retried Acquire on the ensemble: token %d, %v; want the same grant %d", again.Token, err, g.Token)
	}
	e.Cut(f, leader, true)
	restored := false
	defer func() {
		if !restored {
			e.Cut(f, leader, false)
		}
	}()
	// Delete the holder's node through the leader, as an operator would,
	// and let another owner acquire: the quorum is the leader and the
	// third server.
	dir := onLeader.Prefix() + "/locks/k" + url.QueryEscape(key)
	names, _, err := onLeader.Conn().Children(dir)
	if err != nil || len(names) != 1 {
		t.Fatalf("queue through the leader: %v, %v", names, err)
	}
	if err := onLeader.Conn().Delete(dir+"/"+names[0], -1); err != nil {
		t.Fatal(err)
	}
	next, err := onLeader.Acquire(ctx, key, backend.Owner{Instance: "next", Nonce: backend.NewNonce()}, ttl)
	if err != nil {
		t.Fatalf("Acquire through the leader after the delete: %v", err)
	}
	retried, err := onFollower.Acquire(ctx, key, o, ttl)
	if err == nil {
		t.Fatalf("retried Acquire answered yours (token %d) while %d holds the key: a stale follower read", retried.Token, next.Token)
	}
	t.Logf("retried Acquire through the cut-off follower: %v", err)
	e.Cut(f, leader, false)
	restored = true
}

// TestEnsembleConformanceLeases runs the suite's lease checks on a
// 3-server ensemble, each backend connected to all three servers (a
// session then lives on whichever the client picked). Not
// ExclusionUnder64Goroutines: 40 s on an ensemble on this 2-core host; the
// standalone suite runs it.
func TestEnsembleConformanceLeases(t *testing.T) {
	e := testserver.ZooKeeperEnsemble3(t)
	h := conformance.Harness{
		New: func(t testing.TB) backend.Leases {
			b, err := zookeeper.OpenConfig(context.Background(), zookeeper.Config{Servers: e.Addrs(), Prefix: fmt.Sprintf("/t%d", prefixes.Add(1)),
				SessionTimeout: 40 * time.Second, ConnectTimeout: 30 * time.Second})
			if err != nil {
				t.Fatalf("zookeeper.OpenConfig: %v", err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
		Want: want(),
	}
	conformance.RunWrapped(t, h, func(b backend.Backend) backend.Backend { return b },
		"AcquireHeldGet", "TokensIncreaseOver1000Handovers", "RenewKeepsToken", "StaleHolderCannotRenewOrRelease",
		"SameInstanceNameOtherNonce", "RetriedAcquireAnswersYours", "RetriedAcquireRenewsExpiry",
		"ExpiryLetsNextHolderIn", "LockLateAppliedAttemptNeverOutlivesLease")
}
