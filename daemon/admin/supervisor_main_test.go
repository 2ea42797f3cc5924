package admin_test

import (
	"os"
	"testing"

	"github.com/leasehold/leasehold/internal/supervisor"
)

// TestMain lets the test binary serve as the supervisor of the command
// jobs these tests run (internal/supervisor re-executes this program).
func TestMain(m *testing.M) {
	if supervisor.IsSupervisor(os.Args) {
		os.Exit(supervisor.Main())
	}
	os.Exit(m.Run())
}
