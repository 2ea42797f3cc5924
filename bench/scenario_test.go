package bench

import (
	"context"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/cmd/leasehold-lab/benchkit"
)

// pct is benchkit.Percentile, the one definition the CLI shares.
var pct = benchkit.Percentile

// BenchmarkSeed: 10,000 goroutines each try once to take one of 100 keys,
// waiting at most 50 ms; the holder releases at once. Run with
// -benchtime 1x; outcomes and latency percentiles are reported as metrics.
func BenchmarkSeed(b *testing.B) {
	c := newClient(nodes(b)[0])
	defer c.Close()
	be, err := redis.New(c, redis.WithPrefix("seed:"))
	if err != nil {
		b.Fatal(err)
	}
	lk, err := leasehold.NewLocker(be, leasehold.WithInstance("seed"), leasehold.WithTTL(ttl),
		leasehold.WithBackoff(time.Millisecond, 10*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	// Warm up as a running service would be: every pooled connection
	// dialled, the scripts loaded.
	warmPool(b, c)
	if l, err := lk.Acquire(context.Background(), "warm"); err == nil {
		_ = l.Release(context.Background())
	}
	for i := 0; i < b.N; i++ {
		r := benchkit.Crowd(context.Background(), lk, 10000, 100, 50*time.Millisecond)
		b.ReportMetric(float64(r.Acquired), "acquired")
		b.ReportMetric(float64(r.NotAcquired-r.NotSent), "not-acquired")
		b.ReportMetric(float64(r.NotSent), "not-sent")
		b.ReportMetric(float64(r.Indeterminate), "indeterminate")
		b.ReportMetric(float64(r.Errors), "errors")
		b.ReportMetric(float64(r.P50.Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(r.P99.Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(r.P999.Microseconds())/1000, "p99.9-ms")
		if r.FirstError != nil {
			b.Logf("first error: %v", r.FirstError)
		}
	}
}

// pollOnly hides the backend's Notifier, so waiters poll with backoff.
type pollOnly struct{ backend.Backend }

// BenchmarkHandover: a holder releases, a waiter blocked in Acquire takes
// over; latency from the release call to the waiter's grant, with push
// events (Notifier) and with polling (the library's default backoff).
func BenchmarkHandover(b *testing.B) {
	c := newClient(nodes(b)[0])
	defer c.Close()
	be, err := redis.New(c, redis.WithPrefix("handover:"))
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []struct {
		name string
		be   backend.Backend
	}{{"push", be}, {"poll", pollOnly{be}}} {
		b.Run(mode.name, func(b *testing.B) {
			holder, _ := leasehold.NewLocker(mode.be, leasehold.WithInstance("holder"), leasehold.WithTTL(ttl))
			waiter, _ := leasehold.NewLocker(mode.be, leasehold.WithInstance("waiter"), leasehold.WithTTL(ttl))
			lat, err := benchkit.Handover(context.Background(), holder, waiter, "handover/k", b.N)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(pct(lat, 0.5).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(pct(lat, 0.99).Microseconds())/1000, "p99-ms")
		})
	}
}

// warmPool dials every connection of c's pool before timing starts.
func warmPool(b *testing.B, c *goredis.Client) {
	b.Helper()
	var wg sync.WaitGroup
	for range c.Options().PoolSize {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.Ping(context.Background()).Err()
		}()
	}
	wg.Wait()
}
