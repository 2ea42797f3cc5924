package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/backend/redlock"
	"github.com/leasehold/leasehold/cmd/leasehold-lab/benchkit"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// BenchmarkBurst is the seed's scenario (see BenchmarkSeedScenario) at
// 1,000, 10,000 and 20,000 clients for leasehold on one node, on the
// 5-node Redlock and on a Redis Cluster (3 primaries + 3 replicas), and
// for every Redis peer, in one run, with the floor measured in the same
// run before each size:
//
//	cd bench && go test -run '^$' -bench '^BenchmarkBurst$' -benchtime 1x -timeout 30m
//
// floor/set is one pipeline of n SET NX PX on one connection, from one
// goroutine (floor-ms), and floor/pair that pipeline then one of n DEL
// (floor-ms). naive is one SET NX PX per client and try, released with DEL:
// what a client with no lock library would do.
func BenchmarkBurst(b *testing.B) {
	addrs := nodes(b)
	var cs []*goredis.Client
	var ucs []goredis.UniversalClient
	for _, a := range addrs {
		c := newClient(a)
		defer c.Close()
		warmPool(b, c)
		cs = append(cs, c)
		ucs = append(ucs, c)
	}
	rc := testserver.StartRedisCluster(b)
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: rc.Addrs(), PoolSize: 128, ContextTimeoutEnabled: true})
	defer cc.Close()
	if err := cc.ForEachMaster(context.Background(), func(ctx context.Context, c *goredis.Client) error {
		warmPool(b, c)
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	var closers []func() error
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	impls := []struct {
		name string
		make func() seedImpl
	}{
		{"leasehold-redis", func() seedImpl {
			be, err := redis.New(cs[0], redis.WithPrefix("burst:"))
			must(err)
			closers = append(closers, be.Close)
			return lockerImpl("leasehold-redis", be)
		}},
		{"redislock", func() seedImpl { return redislockImpl(cs[0]) }},
		{"redsync", func() seedImpl { return redsyncImpl("redsync", cs[:1]) }},
		{"naive", func() seedImpl { return naiveImpl(cs[0]) }},
		{"leasehold-redlock5", func() seedImpl {
			be, err := redlock.New(ucs, redlock.WithPrefix("burst5:"))
			must(err)
			closers = append(closers, be.Close)
			return lockerImpl("leasehold-redlock5", be)
		}},
		{"redsync5", func() seedImpl { return redsyncImpl("redsync5", cs) }},
		{"leasehold-redis-cluster", func() seedImpl {
			be, err := redis.New(cc, redis.WithPrefix("burstc:"))
			must(err)
			closers = append(closers, be.Close)
			return lockerImpl("leasehold-redis-cluster", be)
		}},
		{"redislock-cluster", func() seedImpl {
			return seedImpl{name: "redislock-cluster", try: redislockTry(redislock.New(cc))}
		}},
	}
	// Server processes whose CPU a run counts: the five nodes (one node
	// and Redlock) and the Cluster's six.
	var pids []int
	for _, s := range servers[:len(addrs)] {
		pids = append(pids, s.PID())
	}
	for _, s := range rc.Nodes {
		pids = append(pids, s.PID())
	}
	made := map[string]seedImpl{}
	for _, n := range burstSizes(b) {
		for _, kind := range []string{"set", "pair"} {
			b.Run(fmt.Sprintf("n%d/floor-%s", n, kind), func(b *testing.B) {
				for range b.N {
					time.Sleep(500 * time.Millisecond)
					d, err := floorPipeline(cs[0], n, kind == "pair", fmt.Sprint(seedRuns.Add(1)))
					must(err)
					b.ReportMetric(float64(d.Microseconds())/1000, "floor-ms")
				}
			})
		}
		for _, im := range impls {
			b.Run(fmt.Sprintf("n%d/%s", n, im.name), func(b *testing.B) {
				si, ok := made[im.name]
				if !ok {
					si = im.make()
					made[im.name] = si
				}
				for range b.N {
					// Let the previous run's releases and cleanups drain.
					time.Sleep(500 * time.Millisecond)
					s0, c0 := cpuTime(pids...), cpuTime(0)
					r := seedRun(si, n, fmt.Sprint(seedRuns.Add(1)))
					s1, c1 := cpuTime(pids...), cpuTime(0)
					report(b, r)
					// CPU per client (10 ms ticks): this process, and the
					// redis-servers (every node, whichever the run used).
					b.ReportMetric(float64((c1-c0).Microseconds())/float64(n), "cli-cpu-µs/client")
					b.ReportMetric(float64((s1-s0).Microseconds())/float64(n), "srv-cpu-µs/client")
				}
			})
		}
	}
}

// floorPipeline sends n SET NX PX as one pipeline on one connection (and,
// with pair, then n DEL as another) and returns how long it took.
func floorPipeline(c *goredis.Client, n int, pair bool, run string) (time.Duration, error) {
	ctx := context.Background()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "floor/" + run + "/k" + strconv.Itoa(i)
	}
	t0 := time.Now()
	p := c.Pipeline()
	sets := make([]*goredis.BoolCmd, n)
	for i, k := range keys {
		sets[i] = p.SetNX(ctx, k, "x", benchkit.SeedTTL)
	}
	if _, err := p.Exec(ctx); err != nil {
		return 0, err
	}
	for i, s := range sets {
		if !s.Val() {
			return 0, fmt.Errorf("floor: %s was held", keys[i])
		}
	}
	if pair {
		p = c.Pipeline()
		for _, k := range keys {
			p.Del(ctx, k)
		}
		if _, err := p.Exec(ctx); err != nil {
			return 0, err
		}
	}
	d := time.Since(t0)
	if !pair { // clean up, not timed
		p = c.Pipeline()
		for _, k := range keys {
			p.Del(ctx, k)
		}
		_, _ = p.Exec(ctx)
	}
	return d, nil
}

// naiveImpl is one SET NX PX per try, released with DEL: no token, no
// owner check, no retry of its own.
func naiveImpl(c *goredis.Client) seedImpl {
	return seedImpl{name: "naive", try: func(ctx context.Context, key string) (func(), benchkit.Outcome, error) {
		ok, err := c.SetNX(ctx, key, "x", benchkit.SeedTTL).Result()
		if err != nil {
			return nil, timeoutOutcome(err), err
		}
		if !ok {
			return nil, benchkit.NotAcquired, fmt.Errorf("naive: %s held", key)
		}
		return func() { _ = c.Del(context.Background(), key).Err() }, benchkit.Acquired, nil
	}}
}

// burstSizes returns the client counts of a burst run: 1,000, 10,000 and
// 20,000, or those $LEASEHOLD_BURST_CLIENTS lists (comma-separated), which
// CI sets small for its one pass of every benchmark.
func burstSizes(b *testing.B) []int {
	env := os.Getenv("LEASEHOLD_BURST_CLIENTS")
	if env == "" {
		return []int{1000, 10000, 20000}
	}
	var sizes []int
	for _, f := range strings.Split(env, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("LEASEHOLD_BURST_CLIENTS=%q: %q is not a positive client count", env, f)
		}
		sizes = append(sizes, n)
	}
	return sizes
}
