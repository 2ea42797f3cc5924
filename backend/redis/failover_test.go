package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// Replication in Redis is asynchronous: a primary acknowledges a write
// before any replica has it. These tests make that window certain instead
// of hoping for it: the replicas are paused (SIGSTOP) and the primary's
// replication stream is filled until its output buffer for every replica
// holds data the kernel could not take (CLIENT LIST omem > 0). A grant
// made then is at the tail of that buffer, in the primary's memory only;
// killing the primary loses it, and the replica promoted next never saw
// it.

// stalledExtra keeps a primary from dropping a replica that stops reading.
var stalledExtra = []string{"--client-output-buffer-limit", "replica 0 0 0"}

// stallReplication fills primary's replication stream (with keys sharing
// tag's hash slot, so that on a Cluster they go to the same node) until
// the output buffer of each of its want replicas is non-empty: anything
// written after it has reached no replica. The replicas must be paused.
func stallReplication(t *testing.T, primary, tag string, want int) {
	t.Helper()
	ctx := context.Background()
	c := goredis.NewClient(&goredis.Options{Addr: primary})
	defer c.Close()
	junk := strings.Repeat("x", 1<<20)
	for i := 0; ; i++ {
		if stalledReplicas(t, c) >= want {
			return
		}
		if i == 512 {
			t.Fatalf("wrote 512 MiB and the replication stream of %s is not stalled", primary)
		}
		if err := c.Set(ctx, fmt.Sprintf("junk{%s}%d", tag, i), junk, 0).Err(); err != nil {
			t.Fatalf("junk write: %v", err)
		}
	}
}

// stalledReplicas counts the replica connections of c's server whose
// output buffer is non-empty.
func stalledReplicas(t *testing.T, c *goredis.Client) int {
	t.Helper()
	list, err := c.Do(context.Background(), "CLIENT", "LIST", "TYPE", "replica").Text()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "omem="); ok {
				if m, _ := strconv.Atoi(v); m > 0 {
					n++
				}
			}
		}
	}
	return n
}

// acquireEventually acquires key for o on b, retrying while the deployment
// fails over (errors until a new primary serves the key).
func acquireEventually(t *testing.T, b *redis.Backend, key string, o backend.Owner) backend.Grant {
	t.Helper()
	var (
		g   backend.Grant
		err error
	)
	if !eventually.Within(60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		g, err = b.Acquire(ctx, key, o, time.Minute)
		return err == nil
	}) {
		t.Fatalf("acquire after the failover: %v", err)
	}
	return g
}

// failoverCase is one deployment with a primary to kill.
type failoverCase struct {
	open func(t *testing.T, opts ...redis.Option) *redis.Backend
	// primaryOf returns the primary serving key (as the backend names it)
	// and its replicas.
	primaryOf func(t *testing.T, b *redis.Backend, key string) (primary *testserver.Server, replicas []*testserver.Server)
	// waitFailover waits until a replica of old has taken over.
	waitFailover func(t *testing.T, old *testserver.Server)
}

func sentinelCase(t *testing.T) failoverCase {
	s := testserver.StartRedisSentinel(t, stalledExtra...)
	return failoverCase{
		open: func(t *testing.T, opts ...redis.Option) *redis.Backend { return openSentinel(t, s, opts...) },
		primaryOf: func(t *testing.T, _ *redis.Backend, _ string) (*testserver.Server, []*testserver.Server) {
			return s.Primary, s.Replicas
		},
		waitFailover: func(t *testing.T, old *testserver.Server) {
			var (
				m   string
				err error
			)
			if !eventually.Within(60*time.Second, func() bool {
				if m, err = s.Master(); err != nil || m == old.Addr() {
					return false
				}
				role, _ := testserver.Role(m)
				return role == "master"
			}) {
				t.Fatalf("Sentinel did not fail over: master %q, %v", m, err)
			}
		},
	}
}

func clusterCase(t *testing.T) failoverCase {
	rc := testserver.StartRedisCluster(t, stalledExtra...)
	return failoverCase{
		open: func(t *testing.T, opts ...redis.Option) *redis.Backend { return openCluster(t, rc, opts...) },
		primaryOf: func(t *testing.T, b *redis.Backend, key string) (*testserver.Server, []*testserver.Server) {
			nc, err := b.Client().(*goredis.ClusterClient).MasterForKey(context.Background(), b.Prefix()+"lease:{"+key+"}")
			if err != nil {
				t.Fatal(err)
			}
			var primary *testserver.Server
			for _, n := range rc.Nodes {
				if n.Addr() == nc.Options().Addr {
					primary = n
				}
			}
			info, err := testserver.RedisCommand(primary.Addr(), "INFO", "replication")
			if err != nil {
				t.Fatal(err)
			}
			var replicas []*testserver.Server
			for _, n := range rc.Nodes {
				if strings.Contains(info, fmt.Sprintf("port=%d,", n.Port())) {
					replicas = append(replicas, n)
				}
			}
			if primary == nil || len(replicas) != 1 {
				t.Fatalf("primary %v, replicas %d of key %q; INFO: %s", primary, len(replicas), key, info)
			}
			return primary, replicas
		},
		waitFailover: func(t *testing.T, old *testserver.Server) {
			rc.WaitOK(t, 60*time.Second)
		},
	}
}

// TestFailoverLosesAcknowledgedGrant is the predicted anomaly, shown on a
// Sentinel set and on a Cluster: a grant the primary acknowledged, made
// while its replicas lagged, is lost when the primary dies; the promoted
// replica grants the lease again to another owner with a token that is
// not greater. The declaration says so: DurableFencing is false on both.
func TestFailoverLosesAcknowledgedGrant(t *testing.T) {
	for name, setup := range map[string]func(*testing.T) failoverCase{"sentinel": sentinelCase, "cluster": clusterCase} {
		t.Run(name, func(t *testing.T) {
			fc := setup(t)
			b := fc.open(t)
			if c := b.Capabilities(); c.DurableFencing {
				t.Fatalf("a primary with replicas declares DurableFencing: %+v", c)
			}
			ctx := context.Background()
			const key = "fo"
			a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
			g1, err := b.Acquire(ctx, key, a, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Release(ctx, key, a, g1.Token); err != nil {
				t.Fatal(err)
			}
			primary, replicas := fc.primaryOf(t, b, key)
			for _, r := range replicas {
				r.Pause()
			}
			stallReplication(t, primary.Addr(), key, len(replicas))
			g2, err := b.Acquire(ctx, key, a, time.Minute)
			if err != nil {
				t.Fatalf("acquire on the primary: %v", err)
			}
			primary.Kill()
			for _, r := range replicas {
				r.Resume()
			}
			fc.waitFailover(t, primary)
			other := backend.Owner{Instance: "b", Nonce: backend.NewNonce()}
			g3 := acquireEventually(t, fc.open(t), key, other)
			t.Logf("before the failover: %q granted to a with token %d; after: granted to b with token %d", key, g2.Token, g3.Token)
			if g3.Token > g2.Token {
				t.Fatalf("the promoted replica had the lost grant (token %d after %d): the anomaly was not produced", g3.Token, g2.Token)
			}
		})
	}
}

// TestWaitReplicasKeepsGrantsAcrossFailover: the mitigation. With
// WithWaitReplicas covering every replica, the same grant is not reported:
// WAIT times out and the acquire fails with ErrNotReplicated (outcome
// unknown, never "not applied"), so no reported grant is lost by the
// failover, and a grant the replicas confirmed survives it.
func TestWaitReplicasKeepsGrantsAcrossFailover(t *testing.T) {
	for name, setup := range map[string]func(*testing.T) failoverCase{"sentinel": sentinelCase, "cluster": clusterCase} {
		t.Run(name, func(t *testing.T) {
			fc := setup(t)
			ctx := context.Background()
			const key = "fw"
			probe := fc.open(t)
			primary, replicas := fc.primaryOf(t, probe, key)
			b := fc.open(t, redis.WithWaitReplicas(len(replicas), 2*time.Second), redis.WithPrefix(probe.Prefix()))
			a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
			kept, err := b.Acquire(ctx, "kept", a, time.Minute) // confirmed by every replica
			if err != nil {
				t.Fatalf("acquire with every replica up: %v", err)
			}
			for _, r := range replicas {
				r.Pause()
			}
			stallReplication(t, primary.Addr(), key, len(replicas))
			_, err = b.Acquire(ctx, key, a, time.Minute)
			if !errors.Is(err, redis.ErrNotReplicated) || errors.Is(err, backend.ErrNotApplied) {
				t.Fatalf("acquire while the replicas lag: %v, want ErrNotReplicated (unknown outcome)", err)
			}
			primary.Kill()
			for _, r := range replicas {
				r.Resume()
			}
			fc.waitFailover(t, primary)
			other := backend.Owner{Instance: "b", Nonce: backend.NewNonce()}
			after := fc.open(t, redis.WithPrefix(probe.Prefix()))
			if !eventually.Within(60*time.Second, func() bool {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				_, err = after.Acquire(cctx, "kept", other, time.Minute)
				var held *backend.HeldError
				if errors.As(err, &held) {
					return true // the confirmed grant survived the failover
				}
				if err == nil {
					t.Fatalf("a grant every replica confirmed was lost in the failover (token %d)", kept.Token)
				}
				return false
			}) {
				t.Fatalf("acquire after the failover: %v", err)
			}
		})
	}
}
