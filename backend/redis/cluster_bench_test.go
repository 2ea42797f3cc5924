package redis_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// BenchmarkWaitReplicas measures what WithWaitReplicas costs: acquire +
// release of distinct keys from parallel goroutines, without WAIT and
// with WAIT for every replica, on a Sentinel primary (2 replicas) and on
// a Cluster (1 replica per primary). Compare ns/op of the pairs.
func BenchmarkWaitReplicas(b *testing.B) {
	rc := testserver.StartRedisCluster(b)
	ss := testserver.StartRedisSentinel(b)
	for _, c := range []struct {
		name string
		open func(testing.TB, ...redis.Option) *redis.Backend
		n    int
	}{
		{"sentinel", func(t testing.TB, o ...redis.Option) *redis.Backend { return openSentinel(t, ss, o...) }, 2},
		{"cluster", func(t testing.TB, o ...redis.Option) *redis.Backend { return openCluster(t, rc, o...) }, 1},
	} {
		for _, wait := range []int{0, c.n} {
			b.Run(fmt.Sprintf("%s/wait=%d", c.name, wait), func(b *testing.B) {
				var opts []redis.Option
				if wait > 0 {
					opts = append(opts, redis.WithWaitReplicas(wait, time.Second))
				}
				be := c.open(b, opts...)
				acquireReleaseLoop(b, be)
			})
		}
	}
}

func acquireReleaseLoop(b *testing.B, be *redis.Backend) {
	var seq atomic.Int64
	ctx := context.Background()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprintf("bench-%d", seq.Add(1))
		o := backend.Owner{Instance: "bench", Nonce: backend.NewNonce()}
		for pb.Next() {
			g, err := be.Acquire(ctx, key, o, time.Minute)
			if err != nil {
				b.Error(err)
				return
			}
			if err := be.Release(ctx, key, o, g.Token); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkClusterLedger is the measurement behind keeping the run ledger
// in one hash slot ({ledger}): claims of distinct occurrences from
// parallel goroutines go to one primary, while leases spread over all
// three. If one shard serves far more claims per second than a fleet's
// schedules produce occurrences, one slot costs nothing that matters.
func BenchmarkClusterLedger(b *testing.B) {
	rc := testserver.StartRedisCluster(b)
	b.Run("claim", func(b *testing.B) {
		be := openCluster(b, rc)
		var seq atomic.Int64
		base := time.Now().Truncate(time.Second)
		ctx := context.Background()
		b.SetParallelism(16)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			job := fmt.Sprintf("job-%d", seq.Add(1))
			o := backend.Owner{Instance: "bench", Nonce: backend.NewNonce()}
			i := 0
			for pb.Next() {
				i++
				_, err := be.Claim(ctx, backend.ClaimRequest{Job: job, ScheduledAt: base.Add(time.Duration(i) * time.Second),
					SpecVersion: "v1", Owner: o, TTL: time.Minute, MaxEarly: 24 * time.Hour, MaxLate: 24 * time.Hour * 365})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
	})
	b.Run("lease", func(b *testing.B) {
		be := openCluster(b, rc)
		acquireReleaseLoop(b, be)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
	})
}
