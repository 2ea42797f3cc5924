package memory_test

import (
	"testing"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/memory"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		New:      func(testing.TB) backend.Leases { return memory.New() },
		Parallel: true, // each New is a backend of its own
		NoWire:   "no network: the backend lives in the process's memory",
		Want: backend.Capabilities{
			Name: "memory", ServerClock: true, SafeFencing: true, PushEvents: true, MinTTL: memory.MinTTL,
		},
	})
}
