package leasehold_test

import (
	"context"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/sqlite"
)

// BenchmarkLockerAcquireRelease measures what a user pays for one lock:
// TryAcquire (validation, nonce, one backend acquire, watchdog start) plus
// Release (one backend release), uncontended, on each embedded backend.
func BenchmarkLockerAcquireRelease(b *testing.B) {
	ctx := context.Background()
	backends := map[string]func(b *testing.B) backend.Backend{
		"memory": func(*testing.B) backend.Backend { return memory.New() },
		"sqlite": func(b *testing.B) backend.Backend {
			s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
	}
	for _, name := range []string{"memory", "sqlite"} {
		b.Run(name, func(b *testing.B) {
			be := backends[name](b)
			defer be.Close()
			lk, err := leasehold.NewLocker(be)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				l, err := lk.TryAcquire(ctx, "bench/k")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/parallel-keys", func(b *testing.B) {
			be := backends[name](b)
			defer be.Close()
			lk, err := leasehold.NewLocker(be)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var id int64
			b.RunParallel(func(pb *testing.PB) {
				key := "bench/k" + strconv.FormatInt(atomic.AddInt64(&id, 1), 10)
				for pb.Next() {
					l, err := lk.TryAcquire(ctx, key)
					if err != nil {
						b.Error(err)
						return
					}
					if err := l.Release(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
