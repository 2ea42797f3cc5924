package etcd_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/internal/testserver"
)

var prefixes atomic.Int64

// open returns a backend on endpoints with a fresh key prefix (or the given
// one), closed at the end of the test.
func open(t testing.TB, endpoints []string, prefix ...string) *etcd.Backend {
	t.Helper()
	p := fmt.Sprintf("t%d/", prefixes.Add(1))
	if len(prefix) > 0 {
		p = prefix[0]
	}
	b, err := etcd.OpenConfig(context.Background(), etcd.Config{Endpoints: endpoints, Prefix: p})
	if err != nil {
		t.Fatalf("etcd.OpenConfig: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func want() backend.Capabilities {
	return backend.Capabilities{
		Name: "etcd", ServerClock: true, SafeFencing: true, DurableFencing: true,
		PushEvents: true, MultiProcess: true, MinTTL: etcd.MinTTL, TTLGranularity: etcd.TTLGranularity,
	}
}

// TestConformance runs the suite on a single-member server; Reopen restarts
// the etcd process on the same data directory.
func TestConformance(t *testing.T) {
	srv := testserver.Etcd(t)
	conformance.Run(t, conformance.Harness{
		New:  func(t testing.TB) backend.Leases { return open(t, []string{srv.Addr()}) },
		Want: want(),
		Reopen: func(t testing.TB, b backend.Leases) backend.Leases {
			p := b.(*etcd.Backend).Prefix()
			b.Close()
			srv.Restart()
			return open(t, []string{srv.Addr()}, p)
		},
	})
}
