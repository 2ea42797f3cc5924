package schedule_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/schedule"
)

// leasesOnly hides every method of a backend but those of backend.Leases,
// as a backend that keeps no run ledger (redlock) is built.
type leasesOnly struct{ backend.Leases }

// TestNewRefusesBackendWithoutLedger: the ledger is optional at the seam,
// so the scheduler asks for it, and refuses a backend without one by name.
func TestNewRefusesBackendWithoutLedger(t *testing.T) {
	m := memory.New()
	defer m.Close()
	if _, err := schedule.New(leasesOnly{m}); err == nil {
		t.Fatal("New over a backend without a ledger succeeded")
	} else if !errors.Is(err, backend.ErrNoLedger) || !strings.Contains(err.Error(), `"memory"`) {
		t.Fatalf("New = %v, want an error wrapping backend.ErrNoLedger naming the backend", err)
	}
	if _, err := schedule.New(m); err != nil {
		t.Fatalf("New over the full backend: %v", err)
	}
}
