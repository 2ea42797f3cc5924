package zookeeper_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/zookeeper"
	"github.com/leasehold/leasehold/internal/testserver"
)

var prefixes atomic.Int64

// open returns a backend on addr with a fresh prefix (or the given one)
// and the given session timeout, closed at the end of the test.
func open(t testing.TB, addr string, session time.Duration, prefix ...string) *zookeeper.Backend {
	t.Helper()
	p := fmt.Sprintf("/t%d", prefixes.Add(1))
	if len(prefix) > 0 {
		p = prefix[0]
	}
	// A generous connect bound: on a loaded 2-core host a fresh JVM server
	// can take over 10 s to open its first sessions.
	b, err := zookeeper.OpenConfig(context.Background(), zookeeper.Config{Servers: []string{addr}, Prefix: p, SessionTimeout: session, ConnectTimeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("zookeeper.OpenConfig: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func want() backend.Capabilities {
	return backend.Capabilities{
		Name: "zookeeper", ServerClock: false, SafeFencing: true, DurableFencing: true,
		PushEvents: true, MultiProcess: true, MinTTL: zookeeper.MinTTL,
	}
}

// TestConformance runs the suite on a standalone server; sessions of 40 s
// so that the suite's 30 s leases are granted in full. Reopen restarts the
// server on the same data directory.
func TestConformance(t *testing.T) {
	srv := testserver.ZooKeeper(t)
	conformance.Run(t, conformance.Harness{
		New:  func(t testing.TB) backend.Leases { return open(t, srv.Addr(), 40*time.Second) },
		Want: want(),
		Reopen: func(t testing.TB, b backend.Leases) backend.Leases {
			p := b.(*zookeeper.Backend).Prefix()
			b.Close()
			srv.Restart()
			return open(t, srv.Addr(), 40*time.Second, p)
		},
	})
}
