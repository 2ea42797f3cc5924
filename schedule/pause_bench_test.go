package schedule_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/schedule"
)

// BenchmarkPausedCheck is the read every claim loop makes before it claims
// an occurrence (is the job paused?), next to the claim and outcome record
// it precedes, on the same backend in one run.
func BenchmarkPausedCheck(b *testing.B) {
	ctx := context.Background()
	for _, name := range []string{"memory", "sqlite"} {
		open := func(b *testing.B) backend.Backend {
			if name == "memory" {
				return memory.New()
			}
			s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
			if err != nil {
				b.Fatal(err)
			}
			return s
		}
		b.Run(name+"/paused-read", func(b *testing.B) {
			be := open(b)
			defer be.Close()
			s, err := schedule.New(be, schedule.WithInstance("bench"))
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Register(schedule.Job{Name: "bench", Schedule: "@daily", Func: func(context.Context, schedule.Run) error { return nil }}); err != nil {
				b.Fatal(err)
			}
			if err := s.Pause(ctx, "bench"); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if p, err := s.Paused(ctx, "bench"); err != nil || !p {
					b.Fatal(p, err)
				}
			}
		})
		b.Run(name+"/claim+finish", func(b *testing.B) {
			be := open(b)
			defer be.Close()
			at := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
			for b.Loop() {
				at = at.Add(time.Millisecond)
				cl, err := schedule.ClaimOccurrence(ctx, be, "bench", at, schedule.ClaimOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if err := cl.Finish(ctx, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
