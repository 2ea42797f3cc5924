//go:build linux

package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
)

// TestConformance runs the shared backend suite against real SQLite files,
// each New in its own temp dir.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		New: func(t testing.TB) backend.Leases {
			b, err := Open(context.Background(), dbPath(t))
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return b
		},
		Want: backend.Capabilities{
			Name:           "sqlite",
			ServerClock:    true,
			SafeFencing:    true,
			DurableFencing: true,
			PushEvents:     false,
			MultiProcess:   true,
			MinTTL:         time.Millisecond,
		},
		// Processes share a file: the helper processes open the same path.
		Process: func(t testing.TB) faultkit.Kit {
			return faultkit.Kit{
				Open: openAt, NS: dbPath(t), TTL: faultTTL,
				// Expiry is judged by the host's monotonic clock at TTL
				// after the last renewal; the waiter retries within its
				// 100 ms backoff (+400 ms scheduling slack).
				ExpiryBound: faultTTL + 100*time.Millisecond + 400*time.Millisecond,
			}
		},
		Parallel: true, // each New is a file of its own
		NoWire:   "no network: the backend is a file on the local disk",
		// Reopen closes the backend and opens the same file again, as a
		// restarted process would.
		Reopen: func(t testing.TB, old backend.Leases) backend.Leases {
			sb, ok := old.(*Backend)
			if !ok {
				t.Fatalf("Reopen: %T is not a *sqlite.Backend", old)
			}
			if err := sb.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			b, err := Open(context.Background(), sb.Path())
			if err != nil {
				t.Fatalf("reopen %s: %v", sb.Path(), err)
			}
			return b
		},
	})
}

// faultTTL is the holder's TTL in the process-fault scenarios.
const faultTTL = 1500 * time.Millisecond

// openAt opens the database file path (SQLite has no server: addr is
// empty).
func openAt(t testing.TB, _, path string) backend.Leases { return open(t, path) }

// TestFaultHelper is the helper process of the fault kit.
func TestFaultHelper(t *testing.T) { faultkit.Helper(t, faultkit.Kit{Open: openAt}) }
