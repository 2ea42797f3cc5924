package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/backend/redlock"
	"github.com/leasehold/leasehold/backend/zookeeper"
	"github.com/leasehold/leasehold/cmd/leasehold-lab/benchkit"
)

// The seed's scenario (benchkit.Seed): n clients start at once (a start
// barrier), each takes ITS OWN key with up to 3 tries, each bounded by a
// 50 ms context, 10 ms apart, on a 2 s lease; a client that got its lock
// releases it at once. Every implementation runs under the same harness, in
// one benchmark run:
//
//	cd bench && go test -run '^$' -bench 'SeedScenario' -benchtime 1x -timeout 30m
//
// Reported per implementation and size: success-% (clients that got their
// lock), p50/p99/p99.9-ms of the time from the barrier to the grant (of the
// clients that got it), the last try's outcome of the others
// (not-acquired, indeterminate — a timeout whose outcome is unknown —,
// errors), late-p99-ms / late-max-ms (how long after its context's deadline
// a try returned; 0 when every try returned by its deadline) and wall-ms.
// leasehold-memory is the harness and the Locker alone, without a network.

type seedImpl struct {
	name string
	try  benchkit.Try
	// tries and per override the scenario's (redsync retries itself with
	// the seed's options: one call, one context spanning the tries).
	tries int
	per   time.Duration
}

func seedRun(im seedImpl, n int, run string) benchkit.SeedResult {
	tries, per := benchkit.SeedTries, benchkit.SeedTry
	if im.tries > 0 {
		tries, per = im.tries, im.per
	}
	return benchkit.Seed(n, tries, per, "seed/"+im.name+"/"+run+"/", im.try)
}

func report(b *testing.B, r benchkit.SeedResult) {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(r.SuccessPct(), "success-%")
	b.ReportMetric(ms(r.P50), "p50-ms")
	b.ReportMetric(ms(r.P99), "p99-ms")
	b.ReportMetric(ms(r.P999), "p99.9-ms")
	b.ReportMetric(float64(r.NotAcquired), "not-acquired")
	b.ReportMetric(float64(r.Indeterminate), "indeterminate")
	b.ReportMetric(float64(r.Errors), "errors")
	b.ReportMetric(ms(r.LateP99), "late-p99-ms")
	b.ReportMetric(ms(r.LateMax), "late-max-ms")
	b.ReportMetric(ms(r.Elapsed), "wall-ms")
	if r.FirstError != nil {
		b.Logf("first error: %v", r.FirstError)
	}
}

// lockerImpl is leasehold's Locker.TryAcquire on be, with the seed's TTL.
func lockerImpl(name string, be backend.Leases) seedImpl {
	lk, err := leasehold.NewLocker(be, leasehold.WithInstance("seed"), leasehold.WithTTL(benchkit.SeedTTL))
	if err != nil {
		panic(err)
	}
	return seedImpl{name: name, try: benchkit.LockerTry(lk)}
}

// timeoutOutcome classifies a peer's error: a context that ended is an
// unknown outcome (the peer cannot say whether its SET landed).
func timeoutOutcome(err error, refused ...error) benchkit.Outcome {
	for _, r := range refused {
		if errors.Is(err, r) {
			return benchkit.NotAcquired
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return benchkit.Indeterminate
	}
	return benchkit.Errored
}

func redislockImpl(c *goredis.Client) seedImpl {
	return seedImpl{name: "redislock", try: redislockTry(redislock.New(c))}
}

// redislockTry is one Obtain with the seed's TTL, released with Release.
func redislockTry(lc *redislock.Client) benchkit.Try {
	return func(ctx context.Context, key string) (func(), benchkit.Outcome, error) {
		l, err := lc.Obtain(ctx, key, benchkit.SeedTTL, nil)
		if err != nil {
			return nil, timeoutOutcome(err, redislock.ErrNotObtained), err
		}
		return func() { _ = l.Release(context.Background()) }, benchkit.Acquired, nil
	}
}

// redsyncImpl: redsync with the seed's options, which retries itself; one
// call whose context spans the harness's three tries and two gaps.
func redsyncImpl(name string, cs []*goredis.Client) seedImpl {
	var pools []redsyncredis.Pool
	for _, c := range cs {
		pools = append(pools, rsgoredis.NewPool(c))
	}
	rs := redsync.New(pools...)
	return seedImpl{name: name, tries: 1, per: benchkit.SeedTries*benchkit.SeedTry + (benchkit.SeedTries-1)*benchkit.SeedGap,
		try: func(ctx context.Context, key string) (func(), benchkit.Outcome, error) {
			m := rs.NewMutex(key, redsync.WithExpiry(benchkit.SeedTTL), redsync.WithTries(benchkit.SeedTries), redsync.WithRetryDelay(benchkit.SeedGap))
			if err := m.LockContext(ctx); err != nil {
				var taken *redsync.ErrTaken
				if errors.As(err, &taken) || errors.Is(err, redsync.ErrFailed) {
					return nil, benchkit.NotAcquired, err
				}
				return nil, timeoutOutcome(err), err
			}
			return func() { _, _ = m.UnlockContext(context.Background()) }, benchkit.Acquired, nil
		}}
}

var seedRuns atomic.Int64

// BenchmarkSeedScenario runs the seed's scenario at 1,000 and 10,000
// clients for every implementation. Each implementation's backend or
// client is set up once, when its first sub-benchmark runs.
func BenchmarkSeedScenario(b *testing.B) {
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
			be, err := redis.New(cs[0], redis.WithPrefix("seed:"))
			must(err)
			closers = append(closers, be.Close)
			return lockerImpl("leasehold-redis", be)
		}},
		{"leasehold-memory", func() seedImpl { return lockerImpl("leasehold-memory", memory.New()) }},
		{"redislock", func() seedImpl { return redislockImpl(cs[0]) }},
		{"redsync", func() seedImpl { return redsyncImpl("redsync", cs[:1]) }},
		{"leasehold-redlock5", func() seedImpl {
			be, err := redlock.New(ucs, redlock.WithPrefix("seed5:"))
			must(err)
			closers = append(closers, be.Close)
			return lockerImpl("leasehold-redlock5", be)
		}},
		{"redsync5", func() seedImpl { return redsyncImpl("redsync5", cs) }},
		{"leasehold-postgres", func() seedImpl { return lockerImpl("leasehold-postgres", pgBackend(b)) }},
		{"leasehold-mariadb", func() seedImpl { return lockerImpl("leasehold-mariadb", mysqlBackend(b)) }},
		{"leasehold-etcd", func() seedImpl {
			ec := etcdClient(b, etcdTargets(b)["node1"])
			be, err := etcd.New(ec, etcd.WithPrefix("seed/"))
			must(err)
			closers = append(closers, be.Close, ec.Close)
			return lockerImpl("leasehold-etcd", be)
		}},
		{"leasehold-zookeeper", func() seedImpl {
			be, err := zookeeper.OpenConfig(context.Background(), zookeeper.Config{Servers: []string{zkTarget(b)}, Prefix: "/seed", SessionTimeout: 2 * ttl})
			must(err)
			closers = append(closers, be.Close)
			return lockerImpl("leasehold-zookeeper", be)
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
					// Let the previous run's releases and cleanups drain.
					time.Sleep(500 * time.Millisecond)
					report(b, seedRun(si, n, fmt.Sprint(seedRuns.Add(1))))
				}
			})
		}
	}
}
