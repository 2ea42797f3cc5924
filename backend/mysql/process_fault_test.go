package mysql

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
)

// Process and network fault tests (backend/conformance/faultkit): holders
// in helper processes (this test binary re-executed) killed with SIGKILL or
// claiming one occurrence together, and holders whose connections run
// through a chaos proxy that delays or cuts them. MySQL has no fenced
// write helper, so the kit's fenced checks do not apply.

const faultTTL = 1500 * time.Millisecond

// faultKit describes the backend to the fault kit: a fresh database on the
// shared server. The namespace is its url; Open dials it with the host
// replaced by addr (the server's or a proxy's).
func faultKit(t testing.TB) faultkit.Kit {
	t.Helper()
	u := freshDB(t)
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return faultkit.Kit{
		Open: openAt, Addr: pu.Host, NS: u, TTL: faultTTL,
		// The holder's last renewal granted a TTL before the kill; the
		// waiter retries within its 100 ms backoff (+400 ms slack).
		ExpiryBound: faultTTL + 100*time.Millisecond + 400*time.Millisecond,
	}
}

// openAt opens the database named by the url ns at addr.
func openAt(t testing.TB, addr, ns string) backend.Backend {
	t.Helper()
	pu, err := url.Parse(ns)
	if err != nil {
		t.Fatal(err)
	}
	pu.Host = addr
	b, err := Open(context.Background(), pu.String())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestFaultHelper is the helper process of the fault kit.
func TestFaultHelper(t *testing.T) { faultkit.Helper(t, faultkit.Kit{Open: openAt, TTL: faultTTL}) }

// TestKill9Holder: the lease of a holder killed with SIGKILL expires by the
// server's clock within its TTL; the next holder's token is greater.
func TestKill9Holder(t *testing.T) { faultkit.KillHolder(t, faultKit(t)) }

// TestClaimAcrossProcesses: 32 claimers (4 processes × 8 goroutines) of one
// occurrence; exactly one wins, the others are told it is claimed.
func TestClaimAcrossProcesses(t *testing.T) { faultkit.ClaimAcrossProcesses(t, faultKit(t), 4, 8) }

// TestChaosDelayedRenewReplies: replies to the holder delayed by 0.6×TTL;
// its context ends while the server still holds the lease.
func TestChaosDelayedRenewReplies(t *testing.T) { faultkit.DelayedRenewReplies(t, faultKit(t)) }

// TestChaosConnectionCut: the holder's connections closed or black-holed;
// its context ends by its deadline, and the next holder's token is greater.
func TestChaosConnectionCut(t *testing.T) { faultkit.ConnectionCut(t, faultKit(t)) }
