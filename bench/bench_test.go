// Package bench compares leasehold's Redis and Redlock backends with
// github.com/bsm/redislock and github.com/go-redsync/redsync/v4 on the same
// redis-server processes, started by internal/testkit/testserver. It is a
// separate module so that the peers stay out of the library's dependencies.
//
//	cd bench && go test -run '^$' -bench . -benchtime 2s
package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/backend/redlock"
	"github.com/leasehold/leasehold/cmd/leasehold-lab/benchkit"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

const ttl = 10 * time.Second

var (
	setup   sync.Once
	servers []*testserver.Server
	stopAll func()
)

// redisNodes are the five redis-servers' addresses (servers also holds
// the etcd and ZooKeeper servers other benchmarks start).
var redisNodes []string

// nodes starts (once per run) 5 redis-servers; node 0 is the single-node
// server every single-node benchmark shares.
func nodes(b *testing.B) []string {
	setup.Do(func() {
		for range 5 {
			s := testserver.Redis(&keep{b})
			servers = append(servers, s) // stopped by TestMain
			redisNodes = append(redisNodes, s.Addr())
		}
	})
	return redisNodes
}

// keep is a testing.TB whose Cleanup never runs: the servers live for the
// whole benchmark binary (stopped by TestMain).
type keep struct{ *testing.B }

func (k *keep) Cleanup(func()) {}
func (k *keep) TempDir() string {
	d, err := osMkdirTemp()
	if err != nil {
		k.Fatal(err)
	}
	return d
}

func newClient(addr string) *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 128, ContextTimeoutEnabled: true})
}

// pair is one lock implementation's acquire+release of a key.
type pair func(ctx context.Context, key string) error

// leaseholdPair is the backend's own Acquire + Release (benchkit.LeasePair).
func leaseholdPair(be backend.Leases) pair { return pair(benchkit.LeasePair(be, ttl)) }

func redislockPair(c *goredis.Client) pair {
	lc := redislock.New(c)
	return func(ctx context.Context, key string) error {
		l, err := lc.Obtain(ctx, key, ttl, nil)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
}

func redsyncPair(cs []*goredis.Client) pair {
	var pools []redsyncredis.Pool
	for _, c := range cs {
		pools = append(pools, rsgoredis.NewPool(c))
	}
	rs := redsync.New(pools...)
	return func(ctx context.Context, key string) error {
		m := rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1))
		if err := m.LockContext(ctx); err != nil {
			return err
		}
		_, err := m.UnlockContext(ctx)
		return err
	}
}

func floorPair(c *goredis.Client) pair {
	return func(ctx context.Context, key string) error {
		ok, err := c.SetNX(ctx, key, "x", ttl).Result()
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("floor: %s held", key)
		}
		return c.Del(ctx, key).Err()
	}
}

// run measures p uncontended: every goroutine has its own key.
func run(b *testing.B, p pair, goroutines int) {
	ctx := context.Background()
	var id atomic.Int64
	b.ResetTimer()
	if goroutines == 1 {
		for i := 0; i < b.N; i++ {
			if err := p(ctx, "bench/k1"); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.SetParallelism((goroutines + 1) / 2) // × GOMAXPROCS (2 here) goroutines
	b.RunParallel(func(pb *testing.PB) {
		key := "bench/k" + strconv.FormatInt(id.Add(1), 10)
		for pb.Next() {
			if err := p(ctx, key); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkUncontended(b *testing.B) {
	addr := nodes(b)[0]
	c := newClient(addr)
	defer c.Close()
	lh, err := redis.New(c, redis.WithPrefix("bench:"))
	if err != nil {
		b.Fatal(err)
	}
	impls := []struct {
		name string
		p    pair
	}{
		{"leasehold", leaseholdPair(lh)},
		{"redislock", redislockPair(c)},
		{"redsync", redsyncPair([]*goredis.Client{c})},
		{"floor", floorPair(c)},
	}
	for _, g := range []int{1, 64} {
		for _, im := range impls {
			b.Run(fmt.Sprintf("g%d/%s", g, im.name), func(b *testing.B) { run(b, im.p, g) })
		}
	}
}

func BenchmarkFiveNodes(b *testing.B) {
	var cs []*goredis.Client
	var ucs []goredis.UniversalClient
	for _, a := range nodes(b) {
		c := newClient(a)
		defer c.Close()
		cs = append(cs, c)
		ucs = append(ucs, c)
	}
	rl, err := redlock.New(ucs, redlock.WithPrefix("bench5:"), redlock.WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	for _, g := range []int{1, 64} {
		b.Run(fmt.Sprintf("g%d/leasehold-redlock", g), func(b *testing.B) { run(b, leaseholdPair(rl), g) })
		b.Run(fmt.Sprintf("g%d/redsync", g), func(b *testing.B) { run(b, redsyncPair(cs), g) })
	}
}
