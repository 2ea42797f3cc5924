// Package conformance is the one test suite every leasehold backend must
// pass, run from each backend's own _test.go:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Harness{
//			New:  func(t testing.TB) backend.Leases { return newBackend(t) },
//			Want: backend.Capabilities{Name: "mine", ...},
//		})
//	}
//
// It checks the semantics in docs/semantics.md ("Rules that must hold") against
// the real backend: grant exclusion, fencing tokens, owner guards, idempotent
// retries, expiry, the holder's send-time deadline under delayed replies
// (through a fault-injecting wrapper), elections, the run ledger and bad
// input. The ledger checks run only when the backend implements
// backend.Ledger; for one that declares it keeps no ledger (implements
// backend.Leases alone) they are reported as one skipped subtest, "Ledger",
// naming that declaration. For a networked backend the "Wire" checks put
// fault proxies (internal/chaos) between it and its servers (Harness.Wire;
// wire.go). The process faults (kill -9 or SIGSTOP of a holder process,
// delayed or cut connections, claims from several processes) run for every
// backend its declarations do not rule out (see Harness.Process). It
// asserts the capabilities a backend declares, including the ones it
// declares it lacks. The suite is itself tested: run against a
// deliberately broken backend it must fail (see NegativeControl).
package conformance

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
)

// Harness tells the suite how to get the backend under test.
type Harness struct {
	// New returns a fresh, empty backend isolated from every other New (its
	// own file, database, key prefix...). The suite closes it. When it
	// also implements backend.Ledger, the ledger checks run too.
	New func(t testing.TB) backend.Leases
	// Want is what the backend declares. The suite asserts Capabilities()
	// equals it and tests each declared property.
	Want backend.Capabilities
	// Reopen, required when Want.DurableFencing, closes b and returns a new
	// backend over the same data (after a restart of the server where there
	// is one). The suite checks that tokens keep increasing across it.
	Reopen func(t testing.TB, b backend.Leases) backend.Leases
	// UnsafeFencing, required when !Want.SafeFencing, must demonstrate the
	// declared anomaly: it returns two tokens granted on one key in grant
	// order where the second is not greater than the first.
	UnsafeFencing func(t testing.TB) (first, second uint64)
	// Wire, for a backend that reaches its servers over the network, says
	// how to put fault proxies in between: the "Wire" checks then hold a
	// request at the wire past its retry, and drop a reply after its
	// request was applied (wire.go).
	Wire *Wire
	// NoWire, for a harness without Wire, says why (a backend with no
	// network: memory, SQLite); the Wire checks are reported skipped with
	// it. With CI=true a harness with neither fails the suite.
	NoWire string
	// Process, required when Want.MultiProcess, returns the kit of the
	// process-fault scenarios (package faultkit) for one scenario: the
	// backend's Open, its server's address (empty for a backend with no
	// server, such as a file) and a fresh namespace. Run runs them as
	// "Process/<scenario>"; their helper processes are the test binary
	// re-executed, so the test package also needs TestFaultHelper calling
	// faultkit.Helper with the same Open.
	Process func(t testing.TB) faultkit.Kit
	// Parallel runs the checks in parallel (t.Parallel). Set it only where
	// New and Reopen touch nothing another check's backend uses: its own
	// file or schema, not a shared server that Reopen restarts.
	Parallel bool
	// ParallelSharedServer runs the checks in parallel as Parallel does,
	// except the ones that call Reopen: those run alone, before the
	// parallel ones start. Set it where each New is isolated from every
	// other (a fresh key prefix) on one server that Reopen restarts.
	ParallelSharedServer bool
}

// T is the part of testing.T the checks use, so that the negative control
// can run them against a recorder and see them fail.
type T interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Failed() bool
}

// env is what one check gets: a way to make backends for this check.
type env struct {
	h    Harness
	tb   testing.TB
	wrap func(backend.Backend) backend.Backend // negative control; nil = none
}

// new returns a fresh backend under test (wrapped for the negative control).
func (e *env) new() backend.Leases {
	b := e.h.New(e.tb)
	e.tb.Cleanup(func() { _ = b.Close() })
	if e.wrap != nil {
		full, err := backend.LedgerOf(b)
		if err != nil {
			e.tb.Fatalf("conformance: the negative control wraps a full backend: %v", err)
		}
		return e.wrap(full)
	}
	return b
}

// newLedger returns a fresh backend under test that keeps a ledger; only
// checks marked ledger call it, and Run gives them only such backends.
func (e *env) newLedger(t T) backend.Backend {
	t.Helper()
	full, err := backend.LedgerOf(e.new())
	if err != nil {
		t.Fatalf("conformance: a ledger check got a backend without one: %v", err)
	}
	return full
}

// ttl returns the shortest TTL at least d that the backend grants exactly or
// rounds to its granularity.
func (e *env) ttl(d time.Duration) time.Duration {
	d = max(d, e.h.Want.MinTTL)
	if g := e.h.Want.TTLGranularity; g > 0 {
		d = (d + g - 1) / g * g
	}
	return d
}

type check struct {
	name string
	fn   func(t T, e *env)
}

// ledgerCheckNames are the checks that need backend.Ledger.
func ledgerCheckNames() map[string]bool {
	m := map[string]bool{}
	for _, c := range append(append(append(append(ledgerChecks(), lateChecks()...), onceChecks()...), recordChecks()...), carryOverChecks()...) {
		m[c.name] = true
	}
	return m
}

// reopenCheckNames are the checks that call Harness.Reopen.
func reopenCheckNames() map[string]bool {
	return map[string]bool{"DurableFencing": true}
}

func checks() []check {
	var cs []check
	cs = append(cs, leaseChecks()...)
	cs = append(cs, queueChecks()...)
	cs = append(cs, ledgerChecks()...)
	cs = append(cs, recordChecks()...)
	cs = append(cs, lateChecks()...)
	cs = append(cs, libraryChecks()...)
	cs = append(cs, onceChecks()...)
	cs = append(cs, carryOverChecks()...)
	cs = append(cs, randomizedChecks()...)
	return cs
}

// Run runs the whole suite against the backend h describes.
func Run(t *testing.T, h Harness) {
	if h.New == nil {
		t.Fatal("conformance: Harness.New is nil")
	}
	if h.Want.DurableFencing && h.Reopen == nil {
		t.Fatal("conformance: Want.DurableFencing is declared but Harness.Reopen is nil: a durability claim must be tested")
	}
	if !h.Want.SafeFencing && h.UnsafeFencing == nil {
		t.Fatal("conformance: Want.SafeFencing is false but Harness.UnsafeFencing is nil: the declared anomaly must be shown")
	}
	// Whether the backend keeps a ledger is its declaration, read off the
	// type of one it makes.
	probe := h.New(t)
	_, hasLedger := probe.(backend.Ledger)
	name := probe.Capabilities().Name
	_ = probe.Close()
	runProcessFaults(t, h, name, hasLedger)
	skipped, needs, reopens := 0, ledgerCheckNames(), reopenCheckNames()
	for _, c := range checks() {
		if needs[c.name] && !hasLedger {
			skipped++
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			// A sequential subtest runs to its end before the parallel ones
			// (paused until Run returns) start.
			if h.Parallel || h.ParallelSharedServer && !reopens[c.name] {
				t.Parallel()
			}
			c.fn(t, &env{h: h, tb: t})
		})
	}
	runWire(t, h, name)
	if skipped > 0 {
		t.Run("Ledger", func(t *testing.T) {
			t.Skipf("%d ledger checks not run: backend %q declares no run ledger (it implements backend.Leases, not backend.Ledger)", skipped, name)
		})
	}
}

// recorder is a T that records failures instead of failing a test; Fatalf
// ends the check's goroutine like testing.T does.
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Logf(string, ...any)       {}
func (r *recorder) Errorf(f string, a ...any) { r.add(f, a...) }
func (r *recorder) Fatalf(f string, a ...any) {
	r.add(f, a...)
	runtime.Goexit()
}
func (r *recorder) add(f string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, fmt.Sprintf(f, a...))
}
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs) > 0
}

// NegativeControl runs the named checks against h's backends wrapped by
// wrap (a deliberately broken backend) and fails t for every named check
// that passes: a suite that cannot fail proves nothing.
func NegativeControl(t *testing.T, h Harness, wrap func(backend.Backend) backend.Backend, names ...string) {
	for n, c := range named(t, names) {
		t.Run(n, func(t *testing.T) {
			r := &recorder{}
			done := make(chan struct{})
			go func() {
				defer close(done)
				c.fn(r, &env{h: h, tb: t, wrap: wrap})
			}()
			<-done
			if !r.Failed() {
				t.Errorf("check %q passed against a broken backend; it must fail", n)
				return
			}
			t.Logf("check %q failed as it must: %s", n, strings.Join(r.msgs, "; "))
		})
	}
}

// RunWrapped runs the named checks against h's backends wrapped by wrap and
// expects them to pass: it shows that the library alone keeps a guarantee
// when a backend falls short of one part of the contract (the negative
// control shows the backend check catching that same shortfall).
func RunWrapped(t *testing.T, h Harness, wrap func(backend.Backend) backend.Backend, names ...string) {
	for n, c := range named(t, names) {
		t.Run(n, func(t *testing.T) {
			c.fn(t, &env{h: h, tb: t, wrap: wrap})
		})
	}
}

// named yields the checks called names, in that order, failing t for a
// name that is not a check.
func named(t *testing.T, names []string) iter.Seq2[string, check] {
	byName := map[string]check{}
	for _, c := range checks() {
		byName[c.name] = c
	}
	return func(yield func(string, check) bool) {
		for _, n := range names {
			c, ok := byName[n]
			if !ok {
				t.Fatalf("conformance: no check named %q", n)
			}
			if !yield(n, c) {
				return
			}
		}
	}
}

// --- helpers shared by the checks ---

// ctx returns a context that bounds a check which would otherwise hang.
func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	e.tb.Cleanup(cancel)
	return ctx
}

func owner(name string) backend.Owner {
	return backend.Owner{Instance: name, Nonce: backend.NewNonce()}
}

// eventually polls cond until it is true or the deadline passes.
func eventually(t T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within %v", what, within)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func mustNil(t T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func mustIs(t T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}
