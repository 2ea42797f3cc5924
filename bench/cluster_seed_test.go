package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/cmd/leasehold-lab/benchkit"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// BenchmarkSeedCluster runs the seed's scenario (see BenchmarkSeedScenario)
// on a Redis Cluster of 3 primaries + 3 replicas, with one node beside it
// in the same run for comparison:
//
//	cd bench && go test -run '^$' -bench 'SeedCluster' -benchtime 1x -timeout 30m
func BenchmarkSeedCluster(b *testing.B) {
	rc := testserver.StartRedisCluster(b)
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: rc.Addrs(), PoolSize: 128, ContextTimeoutEnabled: true})
	defer cc.Close()
	if err := cc.ForEachMaster(context.Background(), func(ctx context.Context, c *goredis.Client) error {
		warmPool(b, c)
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	one := newClient(nodes(b)[0])
	defer one.Close()
	warmPool(b, one)
	mk := func(name string, c goredis.UniversalClient) func() seedImpl {
		return func() seedImpl {
			be, err := redis.New(c, redis.WithPrefix(fmt.Sprintf("seedc%d:", seedRuns.Add(1))))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { be.Close() })
			return lockerImpl(name, be)
		}
	}
	impls := []struct {
		name string
		make func() seedImpl
	}{
		{"leasehold-redis-cluster", mk("leasehold-redis-cluster", cc)},
		{"leasehold-redis", mk("leasehold-redis", one)},
		{"redislock-cluster", func() seedImpl {
			lc := redislock.New(cc)
			return seedImpl{name: "redislock-cluster", try: func(ctx context.Context, key string) (func(), benchkit.Outcome, error) {
				l, err := lc.Obtain(ctx, key, benchkit.SeedTTL, nil)
				if err != nil {
					return nil, timeoutOutcome(err, redislock.ErrNotObtained), err
				}
				return func() { _ = l.Release(context.Background()) }, benchkit.Acquired, nil
			}}
		}},
	}
	made := map[string]seedImpl{}
	for _, n := range []int{1000, 10000} {
		for _, im := range impls {
			b.Run(fmt.Sprintf("n%d/%s", n, im.name), func(b *testing.B) {
				si, ok := made[im.name]
				if !ok {
					si = im.make()
					made[im.name] = si
				}
				for range b.N {
					time.Sleep(500 * time.Millisecond) // let the previous run's releases drain
					report(b, seedRun(si, n, fmt.Sprint(seedRuns.Add(1))))
				}
			})
		}
	}
}
