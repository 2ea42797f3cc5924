package zookeeper_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
	"github.com/leasehold/leasehold/backend/zookeeper"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
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

// procSession is the helper process holder's requested session timeout and
// the lock TTL of the process-fault scenarios: the test server grants
// 1 s..60 s, so it is granted as asked. A holder killed or stopped keeps
// its ephemeral node until the server expires its session (nobody deletes
// it earlier: the process that would is dead or stopped); resumed, its
// lock context is cancelled by its local deadline, and its stale renew and
// release are refused once its client has reconnected.
const procSession = 2 * time.Second

// faultKit describes the backend to the process-fault scenarios: a fresh
// prefix on the server at addr. The holders under test (in a helper
// process, or through a proxy) get procSession sessions, so that the
// server expires a killed, stopped or cut-off one soon; the test's direct
// backend a 10 s one (its next holder uses a 5 s TTL).
func faultKit(addr string) faultkit.Kit {
	return faultkit.Kit{
		Open: func(t testing.TB, at, prefix string) backend.Leases {
			if at == addr {
				return open(t, at, 10*time.Second, prefix)
			}
			return openAt(t, at, prefix)
		},
		Addr: addr, NS: fmt.Sprintf("/t%d", prefixes.Add(1)), TTL: procSession, NextTTL: 5 * time.Second,
	}
}

// openAt opens a holder's backend: prefix on the server at addr, with a
// procSession session.
func openAt(t testing.TB, addr, prefix string) backend.Leases {
	return open(t, addr, procSession, prefix)
}

// TestFaultHelper is the helper process of the fault kit.
func TestFaultHelper(t *testing.T) { faultkit.Helper(t, faultkit.Kit{Open: openAt}) }

func want() backend.Capabilities {
	return backend.Capabilities{
		Name: "zookeeper", ServerClock: false, SafeFencing: true, DurableFencing: true,
		PushEvents: true, MultiProcess: true, MinTTL: zookeeper.MinTTL,
	}
}

// TestConformance runs the suite on a standalone server; sessions of 40 s
// so that the suite's 30 s leases are granted in full. Reopen restarts the
// server on the same data directory. The checks run in parallel but for
// the one that restarts the server.
func TestConformance(t *testing.T) {
	t.Parallel()
	srv := testserver.ZooKeeper(t)
	conformance.Run(t, conformance.Harness{
		New:  func(t testing.TB) backend.Leases { return open(t, srv.Addr(), 40*time.Second) },
		Want: want(),
		Wire: &conformance.Wire{
			Framer: chaos.ZooKeeper,
			Open: func(t testing.TB, wrap func(string) string) (backend.Leases, backend.Leases) {
				p := fmt.Sprintf("/t%d", prefixes.Add(1))
				return open(t, wrap(srv.Addr()), 40*time.Second, p), open(t, wrap(srv.Addr()), 40*time.Second, p)
			},
		},
		Reopen: func(t testing.TB, b backend.Leases) backend.Leases {
			p := b.(*zookeeper.Backend).Prefix()
			b.Close()
			srv.Restart()
			return open(t, srv.Addr(), 40*time.Second, p)
		},
		Process: func(testing.TB) faultkit.Kit { return faultKit(srv.Addr()) },
		// Each New is a fresh prefix; Reopen restarts the shared server, so
		// DurableFencing runs alone.
		ParallelSharedServer: true,
	})
}
