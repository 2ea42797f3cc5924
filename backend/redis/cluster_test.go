package redis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// noWireWhy says why the wire checks and wire faults do not run on a
// Cluster or Sentinel client (%s: the kind of client).
const noWireWhy = "a %s client learns the nodes' addresses from the servers and dials them directly, past any proxy on the addresses it was given; the wire checks and wire faults run on the one-node server (TestConformance)"

// clusterClient returns a go-redis Cluster client seeded with every node
// of rc, closed at the end of the test.
func clusterClient(t testing.TB, rc *testserver.RedisCluster) *goredis.ClusterClient {
	t.Helper()
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: rc.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// openCluster returns a backend on the Cluster with a fresh key prefix
// (or the given one).
func openCluster(t testing.TB, rc *testserver.RedisCluster, opts ...redis.Option) *redis.Backend {
	t.Helper()
	opts = append([]redis.Option{redis.WithPrefix(fmt.Sprintf("c%d:", prefixes.Add(1)))}, opts...)
	return newOn(t, clusterClient(t, rc), "on the Cluster", opts...)
}

// newOn returns a backend over c (a Cluster or failover client), closed at
// the end of the test; where names the client in a failure.
func newOn(t testing.TB, c goredis.UniversalClient, where string, opts ...redis.Option) *redis.Backend {
	t.Helper()
	b, err := redis.New(c, opts...)
	if err != nil {
		t.Fatalf("redis.New %s: %v", where, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestClusterConformance runs the whole suite on a real Redis Cluster
// (three primaries, three replicas). Replicas make a failover possible,
// and replication is asynchronous, so DurableFencing is not declared (see
// TestClusterFailoverLosesGrant for the anomaly it stands for).
func TestClusterConformance(t *testing.T) {
	rc := testserver.StartRedisCluster(t)
	conformance.Run(t, conformance.Harness{
		New:     func(t testing.TB) backend.Leases { return openCluster(t, rc) },
		Want:    want(false),
		NoWire:  fmt.Sprintf(noWireWhy, "Cluster"),
		Process: func(t testing.TB) faultkit.Kit { return clusterFaultKit(strings.Join(rc.Addrs(), ",")) },
	})
}

// TestExplainFailover: on a Cluster and a Sentinel set, Explain says that
// a failover can lose grants and hand out lower tokens, and whether
// wait_replicas guards against it.
func TestExplainFailover(t *testing.T) {
	rc := testserver.StartRedisCluster(t)
	ss := testserver.StartRedisSentinel(t)
	for _, c := range []struct {
		name string
		b    *redis.Backend
		want []string
	}{
		{"cluster", openCluster(t, rc), []string{"3 replicas: replication is asynchronous", "repeated or lower token", "wait_replicas=N"}},
		{"cluster+wait", openCluster(t, rc, redis.WithWaitReplicas(1, time.Second)), []string{"each grant waits for 1 replicas"}},
		{"sentinel", openSentinel(t, ss), []string{"role master with 2 replicas", "min-replicas-to-write"}},
	} {
		rs, err := c.b.Explain(context.Background())
		if err != nil {
			t.Fatalf("%s: Explain: %v", c.name, err)
		}
		text := ""
		for _, r := range rs {
			text += r.Capability + ": " + r.Why + "\n"
		}
		for _, w := range c.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: Explain does not say %q:\n%s", c.name, w, text)
			}
		}
		if !strings.Contains(text, "SafeFencing: maxmemory-policy noeviction") || !strings.Contains(text, "a failover can lose the last grants") {
			t.Errorf("%s: SafeFencing is not qualified by the failover:\n%s", c.name, text)
		}
		if c := c.b.Capabilities(); c.DurableFencing || !c.SafeFencing {
			t.Errorf("%s: declared %+v, want SafeFencing without DurableFencing", c.Name, c)
		}
	}
}

// clusterFaultKit describes a Cluster backend to the fault kit: addrs is
// the seed list, comma-separated (the helper process gets it the same way).
func clusterFaultKit(addrs string) faultkit.Kit {
	return faultkit.Kit{
		Open: func(t testing.TB, addrs, prefix string) backend.Leases {
			c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: strings.Split(addrs, ","), ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return newOn(t, c, "on the Cluster", redis.WithPrefix(prefix))
		},
		Addr: addrs, NS: fmt.Sprintf("cf%d:", prefixes.Add(1)), TTL: faultTTL,
		ExpiryBound: faultTTL + 100*time.Millisecond + 400*time.Millisecond,
		HelperTest:  "TestClusterFaultHelper",
		NoWire:      fmt.Sprintf(noWireWhy, "Cluster"),
	}
}

// TestClusterFaultHelper is the helper process of the Cluster fault tests.
func TestClusterFaultHelper(t *testing.T) { faultkit.Helper(t, clusterFaultKit("")) }
