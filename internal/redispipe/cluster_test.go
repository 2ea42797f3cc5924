package redispipe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

func clusterClient(t *testing.T, rc *testserver.RedisCluster) *goredis.ClusterClient {
	t.Helper()
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: rc.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestClusterGroupsByNode: a burst on keys spread over the Cluster's
// three primaries goes out as a few batches per node, each call reaches
// the node that serves its slot (a batch mixing nodes would get MOVED
// answers), and each is applied exactly once.
func TestClusterGroupsByNode(t *testing.T) {
	rc := testserver.StartRedisCluster(t)
	cc := clusterClient(t, rc)
	p := New(cc)
	t.Cleanup(p.Close)
	p.Batch = true
	gate := make(chan struct{})
	var taken, batches atomic.Int64
	p.BeforeSend = func(n int) {
		taken.Add(int64(n))
		batches.Add(1)
		<-gate
	}
	const n = 600
	ctx := context.Background()
	ws := make([]*Pending, n)
	for i := range ws {
		ws[i] = p.Start(ctx, countLua, []string{fmt.Sprintf("g{%d}", i)})
	}
	eventually.True(t, 20*time.Second, "the burst to queue", func() bool { return int(taken.Load())+p.Queued() == n })
	close(gate)
	for i, w := range ws {
		if v, err := w.Wait().Int64(); err != nil || v != 1 {
			t.Fatalf("call %d: %d, %v; want 1 (applied once, on its node)", i, v, err)
		}
	}
	if p.Nodes() != 3 {
		t.Errorf("calls went to %d nodes, want the 3 primaries", p.Nodes())
	}
	bound := int64(3 * (DefaultLanes + (n+DefaultMaxBatch-1)/DefaultMaxBatch))
	if b := batches.Load(); b > bound {
		t.Errorf("%d calls took %d batches, want at most %d", n, b, bound)
	}
	t.Logf("%d calls in %d batches over %d nodes", n, batches.Load(), p.Nodes())
}

// TestClusterMovedIsNotApplied: a call sent to a node that no longer
// serves its slot is answered MOVED, which ran nothing: without a
// redirect the caller is told "not applied" (not an unknown outcome);
// through the Pipe, the call follows MOVED to the new owner and is
// applied there exactly once.
func TestClusterMovedIsNotApplied(t *testing.T) {
	rc := testserver.StartRedisCluster(t)
	cc := clusterClient(t, rc)
	ctx := context.Background()
	p := New(cc)
	t.Cleanup(p.Close)
	const key = "moved{k}"
	slot, err := cc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	old, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	oldSub := p.node(old) // the route go-redis's slot map gives now
	// Move the (empty) slot to another primary.
	var masters []string
	for _, a := range rc.Addrs() {
		if role, err := testserver.Role(a); err == nil && role == "master" {
			masters = append(masters, a)
		}
	}
	target := ""
	for _, a := range masters {
		if a != old.Options().Addr {
			target = a
			break
		}
	}
	id, err := testserver.RedisCommand(target, "CLUSTER", "MYID")
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	for _, a := range append([]string{target, old.Options().Addr}, masters...) {
		if _, err := testserver.RedisCommand(a, "CLUSTER", "SETSLOT", fmt.Sprint(slot), "NODE", id); err != nil {
			t.Fatalf("move slot %d to %s: %v", slot, target, err)
		}
	}
	c := p.judge(oldSub.Do(ctx, countLua, []string{key}))
	err = c.Err()
	if !errors.Is(err, backend.ErrNotApplied) || !strings.Contains(err.Error(), "MOVED") {
		t.Fatalf("call on the old owner: %v, want MOVED reported as not applied", err)
	}
	if v, err := cc.Get(ctx, key).Result(); !errors.Is(err, goredis.Nil) {
		t.Fatalf("after MOVED the key holds %q (%v): the call was applied somewhere", v, err)
	}
	// Through the Pipe, a MOVED answer is followed to the new owner once
	// the slot map names it: the call is applied there, once.
	if v, err := p.Do(ctx, countLua, []string{key}).Int64(); err != nil || v != 1 {
		t.Fatalf("call after the move: %d, %v; want 1 (applied once, on the new owner)", v, err)
	}
}

// TestClusterAskIsFollowed: while a slot migrates, its old owner answers
// ASK for a key it does not hold (it ran nothing); the Pipe sends the call
// once more, with ASKING, to the importing node the answer names, where it
// is applied exactly once — not "not applied" for as long as a resharding
// lasts.
func TestClusterAskIsFollowed(t *testing.T) {
	rc := testserver.StartRedisCluster(t)
	cc := clusterClient(t, rc)
	ctx := context.Background()
	p := New(cc)
	t.Cleanup(p.Close)
	const key = "ask{k}"
	slot, err := cc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	src, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	source := src.Options().Addr
	target := ""
	for _, a := range rc.Addrs() {
		if role, err := testserver.Role(a); err == nil && role == "master" && a != source {
			target = a
			break
		}
	}
	nodeID := func(addr string) string {
		id, err := testserver.RedisCommand(addr, "CLUSTER", "MYID")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(id)
	}
	s := fmt.Sprint(slot)
	if _, err := testserver.RedisCommand(target, "CLUSTER", "SETSLOT", s, "IMPORTING", nodeID(source)); err != nil {
		t.Fatal(err)
	}
	if _, err := testserver.RedisCommand(source, "CLUSTER", "SETSLOT", s, "MIGRATING", nodeID(target)); err != nil {
		t.Fatal(err)
	}
	for want := int64(1); want <= 2; want++ {
		if v, err := p.Do(ctx, countLua, []string{key}).Int64(); err != nil || v != want {
			t.Fatalf("call %d while slot %d migrates: %d, %v; want %d (applied once, on the importing node)", want, slot, v, err, want)
		}
	}
	for addr, want := range map[string]string{source: "0", target: "1"} {
		n, err := testserver.RedisCommand(addr, "CLUSTER", "COUNTKEYSINSLOT", s)
		if err != nil || strings.TrimSpace(n) != want {
			t.Errorf("%s holds %q keys of slot %d (%v), want %s", addr, n, slot, err, want)
		}
	}
}
