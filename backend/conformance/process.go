package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/conformance/faultkit"
)

// processTTL is the holder's lock TTL in the process scenarios (rounded to
// what the backend grants) when the kit names none: short, so that each
// scenario takes seconds, and long enough for renewals on a loaded host.
const processTTL = 1500 * time.Millisecond

// processScenario is one of the faultkit scenarios and what it needs of
// the backend.
type processScenario struct {
	name string
	// crossProcess: it runs holders or claimers in helper processes, so
	// the backend must be shareable between processes (MultiProcess).
	crossProcess bool
	// wire: it delays or cuts the holder's connection with a proxy, so the
	// backend must be reached over the network (Kit.Addr set).
	wire bool
	// ledger: it claims an occurrence, so the backend must keep a ledger.
	ledger bool
	run    func(t *testing.T, k faultkit.Kit)
}

func processScenarios() []processScenario {
	return []processScenario{
		{name: "KillHolder", crossProcess: true, run: faultkit.KillHolder},
		{name: "PausedHolder", crossProcess: true, run: faultkit.PausedHolder},
		{name: "DelayedRenewReplies", wire: true, run: faultkit.DelayedRenewReplies},
		{name: "ConnectionCut", wire: true, run: faultkit.ConnectionCut},
		{name: "ClaimAcrossProcesses", crossProcess: true, ledger: true, run: func(t *testing.T, k faultkit.Kit) {
			faultkit.ClaimAcrossProcesses(t, k, 4, 8)
		}},
	}
}

// runProcessFaults runs the process scenarios as subtests "Process/<name>",
// each on a kit of its own from h.Process, one after another (they judge
// timing, and run alone in the sequential part of Run). A scenario the
// backend's declarations rule out is a skipped subtest naming the
// declaration. A backend that declares MultiProcess must supply
// h.Process: the suite fails otherwise, so that no backend skips them by
// leaving it out.
func runProcessFaults(t *testing.T, h Harness, name string, hasLedger bool) {
	if why := processMissing(h, name); why != "" {
		t.Fatal(why)
	}
	e := &env{h: h}
	t.Run("Process", func(t *testing.T) {
		for _, s := range processScenarios() {
			t.Run(s.name, func(t *testing.T) {
				if why := ruledOut(s, h, name, hasLedger); why != "" {
					t.Skip(why)
				}
				k := h.Process(t)
				if k.TTL == 0 {
					k.TTL = e.ttl(processTTL)
				}
				if s.wire && k.NoWire != "" {
					t.Skipf("backend %q: no proxy can stand between it and its servers: %s", name, k.NoWire)
				}
				if s.wire && !k.Wire() {
					t.Skipf("backend %q has no server: its Harness.Process kit has no Addr (it is reached through %q), so there is no connection to delay or cut", name, k.NS)
				}
				start := time.Now()
				s.run(t, k)
				t.Logf("%s on %s took %v (TTL %v)", s.name, name, time.Since(start).Round(time.Millisecond), k.TTL)
			})
		}
	})
}

// processMissing returns why h cannot run the process scenarios its
// backend's declarations call for, or "" when it can.
func processMissing(h Harness, name string) string {
	if h.Want.MultiProcess && h.Process == nil {
		return fmt.Sprintf("conformance: backend %q declares MultiProcess but Harness.Process is nil: the process-fault scenarios (kill -9, SIGSTOP, delayed replies, connection cut, claims across processes) must run", name)
	}
	return ""
}

// ruledOut returns why the backend's declarations rule scenario s out, or
// "" when it must run.
func ruledOut(s processScenario, h Harness, name string, hasLedger bool) string {
	switch {
	case s.crossProcess && !h.Want.MultiProcess:
		return fmt.Sprintf("backend %q declares MultiProcess=false: no second process can share it", name)
	case s.wire && h.Process == nil:
		return fmt.Sprintf("backend %q declares MultiProcess=false and gives no Harness.Process: no server, no connection to delay or cut", name)
	case s.ledger && !hasLedger:
		return fmt.Sprintf("backend %q declares no run ledger (it implements backend.Leases, not backend.Ledger): no occurrence to claim", name)
	}
	return ""
}
