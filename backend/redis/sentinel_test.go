package redis_test

import (
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

// sentinelClient returns a go-redis failover client that finds the
// primary through s's Sentinels, closed at the end of the test.
func sentinelClient(t testing.TB, s *testserver.RedisSentinelSet) *goredis.Client {
	t.Helper()
	c := goredis.NewFailoverClient(&goredis.FailoverOptions{
		MasterName: testserver.RedisSentinelMaster, SentinelAddrs: s.SentinelAddrs(),
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// openSentinel returns a backend on the Sentinel-managed primary with a
// fresh key prefix.
func openSentinel(t testing.TB, s *testserver.RedisSentinelSet, opts ...redis.Option) *redis.Backend {
	t.Helper()
	opts = append([]redis.Option{redis.WithPrefix(fmt.Sprintf("s%d:", prefixes.Add(1)))}, opts...)
	return newOn(t, sentinelClient(t, s), "through Sentinel", opts...)
}

// TestSentinelConformance runs the whole suite on a Sentinel-managed
// primary with two replicas: DurableFencing is not declared (a failover
// can promote a replica that missed the last grants, see
// TestSentinelFailoverLosesGrant).
func TestSentinelConformance(t *testing.T) {
	s := testserver.StartRedisSentinel(t)
	conformance.Run(t, conformance.Harness{
		New:     func(t testing.TB) backend.Leases { return openSentinel(t, s) },
		Want:    want(false),
		NoWire:  fmt.Sprintf(noWireWhy, "Sentinel"),
		Process: func(t testing.TB) faultkit.Kit { return sentinelFaultKit(strings.Join(s.SentinelAddrs(), ",")) },
	})
}

// sentinelFaultKit describes a Sentinel-managed backend to the fault kit:
// addrs is the Sentinels' addresses, comma-separated.
func sentinelFaultKit(addrs string) faultkit.Kit {
	return faultkit.Kit{
		Open: func(t testing.TB, addrs, prefix string) backend.Leases {
			c := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: testserver.RedisSentinelMaster,
				SentinelAddrs: strings.Split(addrs, ","), ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return newOn(t, c, "through Sentinel", redis.WithPrefix(prefix))
		},
		Addr: addrs, NS: fmt.Sprintf("sf%d:", prefixes.Add(1)), TTL: faultTTL,
		ExpiryBound: faultTTL + 100*time.Millisecond + 400*time.Millisecond,
		HelperTest:  "TestSentinelFaultHelper",
		NoWire:      fmt.Sprintf(noWireWhy, "Sentinel"),
	}
}

// TestSentinelFaultHelper is the helper process of the Sentinel fault tests.
func TestSentinelFaultHelper(t *testing.T) { faultkit.Helper(t, sentinelFaultKit("")) }
