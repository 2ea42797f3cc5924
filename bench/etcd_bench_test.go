package bench

// leasehold's etcd and ZooKeeper backends beside etcd's own
// concurrency.NewMutex, on one etcd node and on a 3-member cluster started
// by internal/testkit/testserver:
//
//	cd bench && go test -run '^$' -bench 'Etcd|ZooKeeper' -benchtime 2s

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/backend/zookeeper"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

var (
	etcdOnce, clusterOnce, zkOnce sync.Once
	etcdAddr, zkAddr              string
	clusterAddrs                  []string
	etcdPIDs                      = map[string][]int{} // target → server processes
)

// cpuTime is the user+system CPU time the processes have used so far, from
// /proc/<pid>/stat (clock ticks of 10 ms); 0 for a pid it cannot read.
func cpuTime(pids ...int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		name := "/proc/self/stat"
		if pid > 0 {
			name = "/proc/" + strconv.Itoa(pid) + "/stat"
		}
		raw, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		// Fields after the command name (which may hold spaces): state is
		// field 3, utime 14, stime 15.
		f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(ut+st) * 10 * time.Millisecond
	}
	return total
}

// withCPU runs fn (a timed benchmark body) and reports the CPU time the
// servers and this process used per operation: a figure that depends much
// less on what else runs on the host than ns/op does.
func withCPU(b *testing.B, servers []int, fn func()) {
	s0, c0 := cpuTime(servers...), cpuTime(0)
	fn()
	s1, c1 := cpuTime(servers...), cpuTime(0)
	b.ReportMetric(float64((s1-s0).Microseconds())/float64(b.N), "srv-cpu-µs/op")
	b.ReportMetric(float64((c1-c0).Microseconds())/float64(b.N), "cli-cpu-µs/op")
}

// etcdTargets starts (once per run) a single etcd node and a 3-member
// cluster; TestMain stops them with the other servers.
func etcdTargets(b *testing.B) map[string][]string {
	etcdOnce.Do(func() {
		s := testserver.Etcd(&keep{b})
		servers = append(servers, s)
		etcdAddr = s.Addr()
		etcdPIDs["node1"] = []int{s.PID()}
	})
	clusterOnce.Do(func() {
		c := testserver.EtcdCluster3(&keep{b})
		servers = append(servers, c.Members...)
		clusterAddrs = c.Endpoints()
		for _, m := range c.Members {
			etcdPIDs["cluster3"] = append(etcdPIDs["cluster3"], m.PID())
		}
	})
	return map[string][]string{"node1": {etcdAddr}, "cluster3": clusterAddrs}
}

func zkTarget(b *testing.B) string {
	zkOnce.Do(func() {
		s := testserver.ZooKeeper(&keep{b})
		servers = append(servers, s)
		zkAddr = s.Addr()
	})
	return zkAddr
}

func etcdClient(b *testing.B, eps []string) *clientv3.Client {
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// mutexOncePair: concurrency.NewMutex on one session made up front (the
// session's lease is kept alive by one stream) — the fastest way to use it.
func mutexOncePair(b *testing.B, c *clientv3.Client) pair {
	s, err := concurrency.NewSession(c, concurrency.WithTTL(int(ttl/time.Second)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return func(ctx context.Context, key string) error {
		m := concurrency.NewMutex(s, "mutex/"+key)
		if err := m.Lock(ctx); err != nil {
			return err
		}
		return m.Unlock(ctx)
	}
}

// mutexPerLockPair: a session per lock, as much code using it is written.
func mutexPerLockPair(c *clientv3.Client) pair {
	return func(ctx context.Context, key string) error {
		s, err := concurrency.NewSession(c, concurrency.WithTTL(int(ttl/time.Second)))
		if err != nil {
			return err
		}
		defer s.Close()
		m := concurrency.NewMutex(s, "mutexs/"+key)
		if err := m.Lock(ctx); err != nil {
			return err
		}
		return m.Unlock(ctx)
	}
}

// timed runs p like run, recording each pair's latency; it reports P50 and
// P99 in ms as metrics.
func timed(b *testing.B, p pair, goroutines int) {
	var (
		mu  sync.Mutex
		lat []time.Duration
	)
	q := func(ctx context.Context, key string) error {
		start := time.Now()
		err := p(ctx, key)
		d := time.Since(start)
		mu.Lock()
		lat = append(lat, d)
		mu.Unlock()
		return err
	}
	run(b, q, goroutines)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(pct(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(lat, 0.99).Microseconds())/1000, "p99-ms")
}

// BenchmarkEtcdAcquireRelease: acquire + release of a key per goroutine.
func BenchmarkEtcdAcquireRelease(b *testing.B) {
	for _, target := range []string{"node1", "cluster3"} {
		b.Run(target, func(b *testing.B) {
			eps := etcdTargets(b)[target]
			c := etcdClient(b, eps)
			defer c.Close()
			be, err := etcd.New(c, etcd.WithPrefix("bench/"+target+"/"))
			if err != nil {
				b.Fatal(err)
			}
			impls := []struct {
				name string
				p    func(b *testing.B) pair
			}{
				{"leasehold", func(*testing.B) pair { return leaseholdPair(be) }},
				{"mutex-session-once", func(b *testing.B) pair { return mutexOncePair(b, c) }},
				{"mutex-session-per-lock", func(*testing.B) pair { return mutexPerLockPair(c) }},
			}
			for _, im := range impls {
				for _, g := range []int{1, 64} {
					b.Run(im.name+"/g"+strconv.Itoa(g), func(b *testing.B) {
						p := im.p(b)
						withCPU(b, etcdPIDs[target], func() { timed(b, p, g) })
					})
				}
			}
		})
	}
}

// BenchmarkEtcdAcquireReleaseMid: the same between 1 and 64 goroutines, on
// one node, where etcd's fsync rather than its CPU sets the pace (a group
// commit must not make these slower).
func BenchmarkEtcdAcquireReleaseMid(b *testing.B) {
	eps := etcdTargets(b)["node1"]
	c := etcdClient(b, eps)
	defer c.Close()
	be, err := etcd.New(c, etcd.WithPrefix("bench/mid/"))
	if err != nil {
		b.Fatal(err)
	}
	for _, g := range []int{2, 4, 8, 16} {
		for _, im := range []struct {
			name string
			p    pair
		}{{"leasehold", leaseholdPair(be)}, {"mutex-session-once", mutexOncePair(b, c)}} {
			b.Run(im.name+"/g"+strconv.Itoa(g), func(b *testing.B) {
				withCPU(b, etcdPIDs["node1"], func() { timed(b, im.p, g) })
			})
		}
	}
}

// BenchmarkZooKeeperAcquireRelease: the same on one ZooKeeper server.
func BenchmarkZooKeeperAcquireRelease(b *testing.B) {
	be, err := zookeeper.OpenConfig(context.Background(), zookeeper.Config{Servers: []string{zkTarget(b)}, Prefix: "/bench", SessionTimeout: 2 * ttl})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	for _, g := range []int{1, 64} {
		b.Run("leasehold/g"+strconv.Itoa(g), func(b *testing.B) { timed(b, leaseholdPair(be), g) })
	}
}

// handover measures release → blocked waiter's grant through the library
// (the waiter is woken by the backend's push event), reporting P50/P99.
func handover(b *testing.B, be backend.Leases, key string) {
	holder, _ := leasehold.NewLocker(be, leasehold.WithInstance("holder"), leasehold.WithTTL(ttl))
	waiter, _ := leasehold.NewLocker(be, leasehold.WithInstance("waiter"), leasehold.WithTTL(ttl))
	ctx := context.Background()
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		h, err := holder.Acquire(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			w, err := waiter.Acquire(ctx, key)
			got <- time.Now()
			if err == nil {
				_ = w.Release(ctx)
			}
		}()
		time.Sleep(20 * time.Millisecond) // let the waiter block (benchmark pacing, not a test)
		released := time.Now()
		_ = h.Release(ctx)
		lat = append(lat, (<-got).Sub(released))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(pct(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(lat, 0.99).Microseconds())/1000, "p99-ms")
}

// handoverMutex measures the same for concurrency.NewMutex (its waiter
// watches its predecessor's key).
func handoverMutex(b *testing.B, c *clientv3.Client, key string) {
	hs, _ := concurrency.NewSession(c, concurrency.WithTTL(int(ttl/time.Second)))
	ws, _ := concurrency.NewSession(c, concurrency.WithTTL(int(ttl/time.Second)))
	defer hs.Close()
	defer ws.Close()
	ctx := context.Background()
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		h := concurrency.NewMutex(hs, key)
		if err := h.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			w := concurrency.NewMutex(ws, key)
			err := w.Lock(ctx)
			got <- time.Now()
			if err == nil {
				_ = w.Unlock(ctx)
			}
		}()
		time.Sleep(20 * time.Millisecond)
		released := time.Now()
		_ = h.Unlock(ctx)
		lat = append(lat, (<-got).Sub(released))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(pct(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(lat, 0.99).Microseconds())/1000, "p99-ms")
}

// BenchmarkEtcdHandover: release → waiter latency on one etcd node, and on
// ZooKeeper beside it. Run with -benchtime 100x.
func BenchmarkEtcdHandover(b *testing.B) {
	eps := etcdTargets(b)["node1"]
	c := etcdClient(b, eps)
	defer c.Close()
	be, _ := etcd.New(c, etcd.WithPrefix("bench/handover/"))
	b.Run("leasehold-etcd", func(b *testing.B) { handover(b, be, "handover/k") })
	b.Run("mutex-etcd", func(b *testing.B) { handoverMutex(b, c, "mutexh/k") })
	zb, err := zookeeper.OpenConfig(context.Background(), zookeeper.Config{Servers: []string{zkTarget(b)}, Prefix: "/bench-handover", SessionTimeout: 2 * ttl})
	if err != nil {
		b.Fatal(err)
	}
	defer zb.Close()
	b.Run("leasehold-zookeeper", func(b *testing.B) { handover(b, zb, "handover/k") })
}

// handoverParts times the three parts of a hand-over separately, through
// the backend directly: the holder's Release call, the waiter's wake-up
// after Release returned (its Wait was set before), and the waiter's
// Acquire. It reports P50/P99 of each.
func handoverParts(b *testing.B, be interface {
	backend.Leases
	backend.Notifier
}, key string) {
	ctx := context.Background()
	var rel, wake, acq []time.Duration
	for i := 0; i < b.N; i++ {
		h := backend.Owner{Instance: "h", Nonce: backend.NewNonce()}
		g, err := be.Acquire(ctx, key, h, ttl)
		if err != nil {
			b.Fatal(err)
		}
		ch, err := be.Wait(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := be.Release(ctx, key, h, g.Token); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		<-ch
		t2 := time.Now()
		w := backend.Owner{Instance: "w", Nonce: backend.NewNonce()}
		g2, err := be.Acquire(ctx, key, w, ttl)
		if err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		if err := be.Release(ctx, key, w, g2.Token); err != nil {
			b.Fatal(err)
		}
		rel, wake, acq = append(rel, t1.Sub(t0)), append(wake, t2.Sub(t1)), append(acq, t3.Sub(t2))
	}
	for _, x := range []struct {
		name string
		lat  []time.Duration
	}{{"release", rel}, {"wake", wake}, {"acquire", acq}} {
		slices.Sort(x.lat)
		b.ReportMetric(float64(pct(x.lat, 0.5).Microseconds())/1000, x.name+"-p50-ms")
		b.ReportMetric(float64(pct(x.lat, 0.99).Microseconds())/1000, x.name+"-p99-ms")
	}
}

// BenchmarkHandoverParts: where a hand-over's time goes, on one etcd node
// and on ZooKeeper. Run with -benchtime 200x.
func BenchmarkHandoverParts(b *testing.B) {
	c := etcdClient(b, etcdTargets(b)["node1"])
	defer c.Close()
	be, err := etcd.New(c, etcd.WithPrefix("bench/parts/"))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("etcd", func(b *testing.B) { handoverParts(b, be, "parts/k") })
	zb, err := zookeeper.OpenConfig(context.Background(), zookeeper.Config{Servers: []string{zkTarget(b)}, Prefix: "/bench-parts", SessionTimeout: 2 * ttl})
	if err != nil {
		b.Fatal(err)
	}
	defer zb.Close()
	b.Run("zookeeper", func(b *testing.B) { handoverParts(b, zb, "parts/k") })
}
