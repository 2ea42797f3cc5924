package conformance

import (
	_ "embed"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/model"
)

// The randomized check: many clients issue random lease and ledger
// operations through the fault wrapper (delayed replies, replies lost after
// the request was applied, requests never sent, requests held and delivered
// after the client's retry); every call is recorded with the instants it
// was sent and answered, and the history is checked with porcupine against
// the one reference model of the contract (internal/model), partitioned by
// lease key and by job. A seed reproduces a run's choices; failing seeds are
// kept in testdata/model-seeds.txt and replayed on every run.

// Environment variables of the randomized check.
const (
	// EnvModelSeed replays one seed instead of the regression seeds and a
	// fresh one.
	EnvModelSeed = "LEASEHOLD_MODEL_SEED"
	// EnvSoak, a duration ("10m"), runs fresh seeds one after another, each
	// with the soak budget, for that long.
	EnvSoak = "LEASEHOLD_SOAK"
)

// regressionSeeds is testdata/model-seeds.txt: "<backend> <seed>" lines.
//
//go:embed testdata/model-seeds.txt
var regressionSeeds string

// budget bounds one randomized run.
type budget struct {
	ops     int           // operations issued, all clients together
	span    time.Duration // and for no longer than this
	clients int
	check   time.Duration // porcupine's bound per model; past it the result is unknown
}

// ciBudget keeps the check to a few seconds per backend (it runs for every
// backend in CI); soakBudget is one round of a soak.
func ciBudget() budget {
	return budget{ops: 1600, span: 4 * time.Second, clients: 6, check: 30 * time.Second}
}

func soakBudget() budget {
	return budget{ops: 6000, span: 20 * time.Second, clients: 8, check: 2 * time.Minute}
}

func randomizedChecks() []check {
	return []check{{"Randomized", checkRandomized}}
}

// seedsFor returns the regression seeds kept for the backend called name.
func seedsFor(name, file string) ([]uint64, error) {
	var seeds []uint64
	for i, line := range strings.Split(file, "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("testdata/model-seeds.txt line %d: %q is not \"<backend> <seed>\"", i+1, line)
		}
		s, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("testdata/model-seeds.txt line %d: seed %q: %w", i+1, f[1], err)
		}
		if f[0] == name {
			seeds = append(seeds, s)
		}
	}
	return seeds, nil
}

// runPlan is which seeds to run, with which budget, for how long.
type runPlan struct {
	seeds []uint64 // run first, in order
	fresh bool     // then fresh seeds
	until time.Time
	b     budget
}

func planRuns(name string) (runPlan, error) {
	p := runPlan{b: ciBudget()}
	if v := os.Getenv(EnvModelSeed); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return p, fmt.Errorf("%s=%q is not a seed (an unsigned integer): %w", EnvModelSeed, v, err)
		}
		p.seeds = []uint64{s}
		return p, nil
	}
	kept, err := seedsFor(name, regressionSeeds)
	if err != nil {
		return p, err
	}
	p.seeds, p.fresh = kept, true
	p.until = time.Now() // one fresh seed
	if v := os.Getenv(EnvSoak); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return p, fmt.Errorf("%s=%q is not a positive duration", EnvSoak, v)
		}
		p.b, p.until = soakBudget(), time.Now().Add(d)
	}
	return p, nil
}

func checkRandomized(t T, e *env) {
	t.Helper()
	probe := e.new() // closed at the check's end, as every backend e makes
	caps := e.h.Want
	_, hasLedger := probe.(backend.Ledger)
	name := probe.Capabilities().Name
	p, err := planRuns(name)
	if err != nil {
		t.Fatalf("randomized: %v", err)
	}
	if !caps.SafeFencing {
		t.Logf("randomized: backend %q declares SafeFencing=false: token order is not asserted (exclusion, owner guards and expiry still are)", name)
	}
	if !hasLedger {
		t.Logf("randomized: backend %q keeps no run ledger: ledger operations skipped", name)
	}
	t.Logf("randomized: budget per run: %d ops or %v, %d clients, check bounded by %v per model",
		p.b.ops, p.b.span, p.b.clients, p.b.check)
	unknown, runs := 0, 0
	run := func(seed uint64, label string) bool {
		v := randomizedRun(t, e, name, seed, p.b, caps, label)
		runs++
		if v == porcupine.Unknown {
			unknown++
		}
		return v != porcupine.Illegal
	}
	label := "replayed"
	if p.fresh {
		label = "regression"
	}
	for _, s := range p.seeds {
		if !run(s, label) {
			return
		}
	}
	if p.fresh {
		for first := true; first || time.Now().Before(p.until); first = false {
			if !run(rand.Uint64(), "fresh") {
				return
			}
		}
	}
	if unknown > 0 {
		msg := fmt.Sprintf("randomized: %d of %d runs could not be checked within the bound: their result is unknown, not a pass", unknown, runs)
		// Only a check that judged nothing is a skip; the runs that were
		// checked passed, and a skip would hide them.
		if s, ok := t.(interface{ Skipf(string, ...any) }); ok && unknown == runs {
			s.Skipf("%s", msg)
		}
		t.Logf("%s", msg)
	}
}

// randomizedRun runs and checks one seed on a fresh backend.
func randomizedRun(t T, e *env, name string, seed uint64, b budget, caps backend.Capabilities, label string) porcupine.CheckResult {
	t.Helper()
	replay := fmt.Sprintf("%s=%d go test -race -run 'TestConformance/Randomized' ./backend/%s/", EnvModelSeed, seed, name)
	w := newWorkload(e, seed, b)
	start := time.Now()
	h := w.run()
	ran := time.Since(start)
	_ = w.leases.Leases.Close() // a soak makes many: one open at a time
	for _, p := range h.problems {
		t.Errorf("randomized seed %d: %s (replay: %s)", seed, p, replay)
	}
	if h.granted == 0 {
		t.Errorf("randomized seed %d: %d operations and not one grant: the run judged nothing (replay: %s)", seed, h.ops(), replay)
	}
	opt := model.Options{UnorderedTokens: !caps.SafeFencing}
	worst := porcupine.Ok
	var report []string
	for _, m := range []struct {
		what string
		m    porcupine.Model
		ops  []porcupine.Operation
	}{
		{"leases", model.Leases(opt), h.leases},
		{"ledger", model.Ledger(opt), h.ledger},
	} {
		if len(m.ops) == 0 {
			continue
		}
		cs := time.Now()
		res, info := porcupine.CheckOperationsVerbose(m.m, m.ops, b.check)
		report = append(report, fmt.Sprintf("%s: %d ops %s in %v", m.what, len(m.ops), res, time.Since(cs).Round(time.Millisecond)))
		switch res {
		case porcupine.Illegal:
			if m.what == "leases" && porcupine.CheckOperationsTimeout(m.m, heldUnjudged(m.ops), b.check) == porcupine.Ok {
				// As the chaos checker judges it: a warning, not a failure.
				// A Held answer may name what a backend read after its
				// attempt failed (a quorum node's holder, a grant that
				// expired between an insert and its read-back).
				t.Logf("randomized seed %d: WARNING: only the Held answers are not linearizable (a holder or token named that no linearization has holding the key, or held while free); with them taken as answers that changed nothing, every grant, token, renewal, release and read is (replay: %s)%s",
					seed, replay, explain(m.m, m.ops, info))
				continue
			}
			worst = res
			where := visualize(m.m, info, name, m.what, seed)
			t.Errorf("randomized seed %d: the %s history is not linearizable against the reference model (internal/model)%s; replay: %s; keep it with the line %q in backend/conformance/testdata/model-seeds.txt%s",
				seed, m.what, where, replay, fmt.Sprintf("%s %d", name, seed), explain(m.m, m.ops, info))
		case porcupine.Unknown:
			if worst == porcupine.Ok {
				worst = res
			}
			t.Logf("randomized seed %d: the %s check timed out after %v: UNKNOWN, not a pass (replay: %s)", seed, m.what, b.check, replay)
		}
	}
	t.Logf("randomized seed %d (%s): %d ops by %d clients in %v; checked %s; answers: %s",
		seed, label, h.ops(), b.clients, ran.Round(time.Millisecond), strings.Join(report, "; "), h.summary())
	return worst
}

// visualize writes porcupine's timeline of a failed check next to the
// system's temporary files and returns where, for the message.
func visualize(m porcupine.Model, info porcupine.LinearizationInfo, name, what string, seed uint64) string {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("leasehold-model-%s-%s-%d.html", name, what, seed))
	f, err := os.Create(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if porcupine.Visualize(m, info, f) != nil {
		return ""
	}
	return " (timeline: " + path + ")"
}

// heldUnjudged returns ops with every Held answer taken as one that changed
// nothing and named no holder.
func heldUnjudged(ops []porcupine.Operation) []porcupine.Operation {
	out := slices.Clone(ops)
	for i, op := range out {
		if o, ok := op.Output.(model.LeaseOutput); ok && o.Result == model.Held {
			out[i].Output = model.LeaseOutput{Result: model.Refused}
		}
	}
	return out
}
