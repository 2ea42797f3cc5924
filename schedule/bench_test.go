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
	"github.com/leasehold/leasehold/schedule"
)

// counting counts ledger round trips.
type counting struct {
	backend.Backend
	n atomic.Int64
}

func (c *counting) Claim(ctx context.Context, r backend.ClaimRequest) (backend.Grant, error) {
	c.n.Add(1)
	return c.Backend.Claim(ctx, r)
}

func (c *counting) Finish(ctx context.Context, req backend.FinishRequest) error {
	c.n.Add(1)
	return c.Backend.Finish(ctx, req)
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
			c := &counting{Backend: be}
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
			b.ReportMetric(float64(c.n.Load())/float64(b.N), "roundtrips/op")
		})
	}
}
