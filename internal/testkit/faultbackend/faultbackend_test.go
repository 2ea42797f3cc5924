package faultbackend_test

import (
	"testing"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
)

// TestHidesOptionalInterfaces: like a struct embedding backend.Backend,
// the fault backend offers Leases and Ledger only, whatever it wraps
// (memory is a Notifier).
func TestHidesOptionalInterfaces(t *testing.T) {
	mem := memory.New()
	if _, ok := backend.Leases(mem).(backend.Notifier); !ok {
		t.Fatal("memory is no longer a Notifier: this test checks nothing")
	}
	var l backend.Leases = &faultbackend.Backend{Next: mem}
	if _, ok := l.(backend.Notifier); ok {
		t.Error("the fault backend is a Notifier")
	}
	if _, ok := l.(backend.Queue); ok {
		t.Error("the fault backend is a Queue")
	}
	if _, ok := l.(backend.ServerClock); ok {
		t.Error("the fault backend is a ServerClock")
	}
	if _, err := backend.LedgerOf(l); err != nil {
		t.Errorf("LedgerOf: %v", err)
	}
}
