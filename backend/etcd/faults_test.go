package etcd_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/internal/testserver"
)

// Fault tests on real processes (backend/conformance/faultkit): etcd runs
// as a child process, and the holder is this test binary re-executed,
// killed with SIGKILL or paused with SIGSTOP past its TTL. The holder
// writes through FencedPut before each act, and once more after it lost
// its lease (which must be rejected).

const faultTTL = 2 * time.Second

// locker returns a Locker with the fault TTL and a 5..100 ms backoff.
func locker(t testing.TB, b backend.Leases, name string) *leasehold.Locker {
	t.Helper()
	return faultkit.Kit{TTL: faultTTL}.Locker(t, b, name)
}

// faultKit describes the backend to the fault kit: a fresh key prefix on
// the server at addr, fenced writes to the key "<prefix>sink".
func faultKit(addr string) faultkit.Kit {
	return faultkit.Kit{
		Open: func(t testing.TB, addr, prefix string) backend.Backend { return open(t, []string{addr}, prefix) },
		Addr: addr, NS: fmt.Sprintf("t%d/", prefixes.Add(1)), TTL: faultTTL,
		Fenced: func(ctx context.Context, b backend.Backend, key string, token uint64, value string) error {
			eb := b.(*etcd.Backend)
			return eb.FencedPut(ctx, key, token, eb.Prefix()+"sink", value)
		},
	}
}

// TestFaultHelper is the helper process of the fault kit.
func TestFaultHelper(t *testing.T) { faultkit.Helper(t, faultKit("")) }

func TestKill9Holder(t *testing.T) { faultkit.KillHolder(t, faultKit(testserver.Etcd(t).Addr())) }

func TestSIGSTOPHolder(t *testing.T) { faultkit.PausedHolder(t, faultKit(testserver.Etcd(t).Addr())) }
