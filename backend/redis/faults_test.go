package redis_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
	"github.com/leasehold/leasehold/internal/testserver"
)

// Fault tests on real processes (backend/conformance/faultkit): the Redis
// server is a child process, and the holder is either this test binary
// re-executed (kill -9, SIGSTOP) or an in-process holder whose connection
// runs through a delaying proxy.

const faultTTL = 1500 * time.Millisecond

// faultKit describes the backend to the fault kit: a fresh key prefix on
// the server at addr.
func faultKit(addr string) faultkit.Kit {
	return faultkit.Kit{
		Open: func(t testing.TB, addr, prefix string) backend.Backend { return open(t, addr, prefix) },
		Addr: addr, NS: fmt.Sprintf("t%d:", prefixes.Add(1)), TTL: faultTTL,
		// The server expires the key at the TTL; the waiter retries within
		// its 100 ms backoff (+400 ms scheduling slack).
		ExpiryBound: faultTTL + 100*time.Millisecond + 400*time.Millisecond,
	}
}

// TestFaultHelper is the helper process of the fault kit.
func TestFaultHelper(t *testing.T) { faultkit.Helper(t, faultKit("")) }

func TestKillHolder(t *testing.T) { faultkit.KillHolder(t, faultKit(testserver.Redis(t).Addr())) }

func TestPausedHolder(t *testing.T) { faultkit.PausedHolder(t, faultKit(testserver.Redis(t).Addr())) }

func TestDelayedRenewReplies(t *testing.T) {
	faultkit.DelayedRenewReplies(t, faultKit(testserver.Redis(t).Addr()))
}
