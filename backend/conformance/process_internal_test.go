package conformance

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
)

// TestProcessHarnessRequired: a harness of a backend that declares
// MultiProcess without Harness.Process is refused (Run fails), so that no
// backend skips the process scenarios by leaving the kit out; one that
// declares MultiProcess=false needs none.
func TestProcessHarnessRequired(t *testing.T) {
	shared := Harness{Want: backend.Capabilities{Name: "shared", MultiProcess: true}}
	if why := processMissing(shared, "shared"); !strings.Contains(why, "Harness.Process is nil") {
		t.Errorf("MultiProcess without Process: %q, want a refusal naming Harness.Process", why)
	}
	shared.Process = func(testing.TB) faultkit.Kit { return faultkit.Kit{} }
	if why := processMissing(shared, "shared"); why != "" {
		t.Errorf("MultiProcess with Process: refused: %s", why)
	}
	if why := processMissing(Harness{Want: backend.Capabilities{Name: "local"}}, "local"); why != "" {
		t.Errorf("MultiProcess=false without Process: refused: %s", why)
	}
}

// TestProcessScenariosRuledOutByDeclarations: each scenario is ruled out
// exactly by the declaration it needs, and the reason names it.
func TestProcessScenariosRuledOutByDeclarations(t *testing.T) {
	kit := func(testing.TB) faultkit.Kit { return faultkit.Kit{} }
	local := Harness{Want: backend.Capabilities{Name: "local"}}
	shared := Harness{Want: backend.Capabilities{Name: "shared", MultiProcess: true}, Process: kit}
	for _, s := range processScenarios() {
		why := ruledOut(s, local, "local", true)
		if want := "MultiProcess=false"; !strings.Contains(why, want) {
			t.Errorf("%s on a MultiProcess=false backend: %q, want it ruled out naming %s", s.name, why, want)
		}
		why = ruledOut(s, shared, "shared", false)
		switch {
		case s.ledger && !strings.Contains(why, "no run ledger"):
			t.Errorf("%s on a backend without a ledger: %q, want it ruled out naming the ledger", s.name, why)
		case !s.ledger && why != "":
			t.Errorf("%s on a shared backend without a ledger: ruled out (%s), want it run", s.name, why)
		}
		if why := ruledOut(s, shared, "shared", true); why != "" {
			t.Errorf("%s on a shared backend with a ledger: ruled out (%s), want it run", s.name, why)
		}
	}
}
