package zookeeper_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
	"github.com/leasehold/leasehold/internal/testserver"
)

// Fault tests on real processes (backend/conformance/faultkit): the holder
// is this test binary re-executed with its own ZooKeeper session, killed
// with SIGKILL or paused with SIGSTOP past its session timeout. Its
// ephemeral node goes when the server expires its session (nobody deletes
// it earlier: the process that would is dead or stopped); resumed, its lock
// context is cancelled by its local deadline, and its stale renew and
// release are refused once its client has reconnected.

// procSession is the holder's requested session timeout and lock TTL: the
// test server grants 1 s..60 s, so it is granted as asked.
const procSession = 2 * time.Second

// faultKit describes the backend to the fault kit: a fresh prefix on the
// server at addr; the helper's session times out after procSession, the
// test's own after 10 s (its next holder uses a 5 s TTL).
func faultKit(addr string) faultkit.Kit {
	return faultkit.Kit{
		Open: func(t testing.TB, addr, prefix string) backend.Backend {
			if faultkit.InHelper() {
				return open(t, addr, procSession, prefix)
			}
			return open(t, addr, 10*time.Second, prefix)
		},
		Addr: addr, NS: fmt.Sprintf("/t%d", prefixes.Add(1)), TTL: procSession, NextTTL: 5 * time.Second,
	}
}

// TestFaultHelper is the helper process of the fault kit.
func TestFaultHelper(t *testing.T) { faultkit.Helper(t, faultKit("")) }

func TestKill9Holder(t *testing.T) { faultkit.KillHolder(t, faultKit(testserver.ZooKeeper(t).Addr())) }

func TestSIGSTOPHolder(t *testing.T) {
	faultkit.PausedHolder(t, faultKit(testserver.ZooKeeper(t).Addr()))
}
