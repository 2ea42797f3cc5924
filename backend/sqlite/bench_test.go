//go:build linux

package sqlite

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// BenchmarkAcquireRelease measures one Acquire plus one Release (two
// immediate transactions) on one key in one file, with synchronous=FULL
// (durable, the default) and NORMAL.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, full := range []bool{true, false} {
		name := "synchronous=FULL"
		if !full {
			name = "synchronous=NORMAL"
		}
		b.Run(name, func(b *testing.B) {
			be := open(b, dbPath(b), WithSynchronousFull(full))
			ctx := context.Background()
			o := own("bench")
			b.ResetTimer()
			for b.Loop() {
				o.Nonce = backend.NewNonce()
				g, err := be.Acquire(ctx, "bench/k", o, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if err := be.Release(ctx, "bench/k", o, g.Token); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAcquireReleaseParallel: goroutines of one process on distinct
// keys of one file (writes serialise on the file).
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	be := open(b, dbPath(b))
	ctx := context.Background()
	var n atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := "bench/" + strconv.FormatInt(n.Add(1), 10)
		o := own("bench")
		for pb.Next() {
			o.Nonce = backend.NewNonce()
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
