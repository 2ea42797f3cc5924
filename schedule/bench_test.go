package schedule_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
	"github.com/leasehold/leasehold/schedule"
)

// counting counts ledger round trips in n.
func counting(b backend.Backend, n *atomic.Int64) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnClaim: func(ctx context.Context, next faultbackend.ClaimFunc, r backend.ClaimRequest) (backend.Grant, error) {
			n.Add(1)
			return next(ctx, r)
		},
		OnFinish: func(ctx context.Context, next faultbackend.FinishFunc, req backend.FinishRequest) error {
			n.Add(1)
			return next(ctx, req)
		},
	}
}

// BenchmarkOccurrenceOverhead is the cost leasehold adds to one occurrence:
// its claim and the record of its outcome, with the round trips they take.
func BenchmarkOccurrenceOverhead(b *testing.B) {
	ctx := context.Background()
	for _, name := range []string{"memory", "sqlite"} {
		b.Run(name, func(b *testing.B) {
			var be backend.Backend = memory.New()
			if name == "sqlite" {
				s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
				if err != nil {
					b.Fatal(err)
				}
				be = s
			}
			defer be.Close()
			var roundTrips atomic.Int64
			c := counting(be, &roundTrips)
			at := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
			b.ReportAllocs()
			for b.Loop() {
				at = at.Add(time.Millisecond)
				cl, err := schedule.ClaimOccurrence(ctx, c, "bench", at, schedule.ClaimOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if err := cl.Finish(ctx, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(roundTrips.Load())/float64(b.N), "roundtrips/op")
		})
	}
}
