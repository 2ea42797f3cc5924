//go:build linux

package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
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
		Parallel: true, // each New is a file of its own
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
