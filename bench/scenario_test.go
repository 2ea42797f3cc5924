package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/redis"
)

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

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
		const n, keys = 10000, 100
		var (
			mu                                          sync.Mutex
			lat                                         []time.Duration
			acquired, notAcq, notSent, indeterminate, e int
			firstErr, firstIndet                        error
			wg                                          sync.WaitGroup
		)
		start := make(chan struct{})
		for g := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				t0 := time.Now()
				l, err := lk.Acquire(ctx, fmt.Sprintf("k%d", g%keys))
				d := time.Since(t0)
				if err == nil {
					_ = l.Release(context.Background())
				}
				mu.Lock()
				defer mu.Unlock()
				lat = append(lat, d)
				switch {
				case err == nil:
					acquired++
				case errors.Is(err, leasehold.ErrIndeterminate):
					indeterminate++ // ctx ended while a request was in flight
					if firstIndet == nil {
						firstIndet = err
					}
				case errors.Is(err, backend.ErrNotApplied):
					notSent++ // ctx ended before the request left the queue
				case errors.Is(err, context.DeadlineExceeded), errors.Is(err, leasehold.ErrNotAcquired):
					notAcq++
				default:
					e++
					if firstErr == nil {
						firstErr = err
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		slices.Sort(lat)
		b.ReportMetric(float64(acquired), "acquired")
		b.ReportMetric(float64(notAcq), "not-acquired")
		b.ReportMetric(float64(notSent), "not-sent")
		b.ReportMetric(float64(indeterminate), "indeterminate")
		b.ReportMetric(float64(e), "errors")
		b.ReportMetric(float64(pct(lat, 0.5).Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(pct(lat, 0.99).Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(pct(lat, 0.999).Microseconds())/1000, "p99.9-ms")
		if firstErr != nil {
			b.Logf("first error: %v", firstErr)
		}
		if firstIndet != nil {
			b.Logf("first indeterminate outcome: %v", firstIndet)
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
			ctx := context.Background()
			var lat []time.Duration
			for i := 0; i < b.N; i++ {
				h, err := holder.Acquire(ctx, "handover/k")
				if err != nil {
					b.Fatal(err)
				}
				got := make(chan time.Time, 1)
				go func() {
					w, err := waiter.Acquire(ctx, "handover/k")
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
