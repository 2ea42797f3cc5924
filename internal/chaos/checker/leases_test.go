package checker

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/chaos/harness"
	"github.com/leasehold/leasehold/internal/chaos/history"
)

// ms is a millisecond in the history's nanoseconds.
const ms = int64(time.Millisecond)

// hist builds a hand-made history: times are in ms on the monotonic clock,
// the workload window starts at 0 = Unix ms 1,000,000.
type hist struct {
	events, fenced []history.Event
	op             uint64
}

func (h *hist) ev(e history.Event) { h.events = append(h.events, e) }

// ledger records a ledger operation (the backend's key: namespace:job@ms)
// from call to ret, with its result.
func (h *hist) ledger(proc string, pid int, kind, occ, owner string, token uint64, call, ret float64, result string) {
	h.op++
	key := "ns1:" + occ
	tok := token
	if kind == history.Claim || kind == history.Reclaim {
		tok = 0 // a grant's token comes with its return
	}
	h.ev(history.Event{T: int64(call * float64(ms)), Process: proc, PID: pid, Op: h.op, Phase: history.Call, Kind: kind, Key: key, Owner: owner, Token: tok, TTL: time.Second.Nanoseconds()})
	attempt := 0
	if kind == history.Claim {
		attempt = 1
	}
	if result == history.OK || kind == history.Heartbeat || kind == history.Finish {
		tok = token
	}
	h.ev(history.Event{T: int64(ret * float64(ms)), Process: proc, PID: pid, Op: h.op, Phase: history.Return, Kind: kind, Key: key, Owner: owner,
		Token: tok, TTL: time.Second.Nanoseconds(), Attempt: attempt, Result: result})
}

// point records a worker's event (start, end, lose) of an execution.
func (h *hist) point(proc string, pid int, kind, occ string, token uint64, attempt int, exec uint64, at float64, result string) {
	h.ev(history.Event{T: int64(at * float64(ms)), Process: proc, PID: pid, Op: exec, Phase: history.Point, Kind: kind, Key: occ,
		Token: token, Attempt: attempt, Result: result})
}

// sink records what the fenced sink answered to an effect.
func (h *hist) sink(occ string, token uint64, at float64, result string) {
	h.fenced = append(h.fenced, history.Event{T: int64(at * float64(ms)), Process: "sink", Phase: history.Point, Kind: history.Effect,
		Key: occ, Token: token, Result: result, Sink: "fenced"})
}

// check judges the executions of h on a backend that declares safe,
// durable fencing, as Check does.
func (h *hist) check(adjust ...func(*harness.Run)) *Report {
	run := &harness.Run{TTL: time.Second, JobGrace: 500 * time.Millisecond, ClaimTolerance: 100 * time.Millisecond,
		JobTimeout: 900 * time.Millisecond, WindowMono: [2]int64{0, 60_000 * ms}, WindowWall: [2]int64{1_000_000, 1_060_000},
		Limits:       map[string]int{harness.JobName: 0},
		Applied:      []harness.Fault{{Kind: harness.FaultOverrun, Target: "w2", From: 0, To: 4000 * ms}},
		Capabilities: capsSafe}
	for _, f := range adjust {
		f(run)
	}
	c := &check{run: run, events: h.events, fenced: h.fenced, r: &Report{Run: run}}
	c.ops = joinOps(h.events)
	c.execRules()
	c.verdict()
	return c.r
}

var capsSafe = backend.Capabilities{Name: "sqlite", SafeFencing: true, DurableFencing: true, MultiProcess: true}

const occ = harness.JobName + "@1000160" // due at 160 ms

// overrunCase is the SQLite run of issue 23 (chaos@1796230870800, shifted
// to start at 0): w2 claims (token 73) and starts the run the overrun
// fault makes work 3 s, ignoring its 900 ms timeout. Both its heartbeats
// time out (a starved process, SQLite fsyncs), its lease's end passes, its
// context was already cancelled by the timeout when Run.LeaseLost closes.
// w1 reclaims (token 89, attempt 2), runs it, its effect is accepted and
// its finish is ok. w2's job writes its effect after that: the fenced sink
// rejects it, and its finish is answered lost.
func overrunCase(w2Effect string, loss string) *hist {
	h := &hist{}
	h.ledger("w2", 2, history.Claim, occ, "w2/a", 73, 183.7, 195.4, history.OK)
	h.point("w2", 2, history.Start, occ, 73, 1, 1, 200.3, "")
	h.ledger("w1", 1, history.Claim, occ, "w1/b", 73, 207.1, 812.9, history.Claimed)
	h.ledger("w2", 2, history.Heartbeat, occ, "w2/a", 73, 520.2, 853.8, history.Indeterminate)
	h.ledger("w2", 2, history.Heartbeat, occ, "w2/a", 73, 928.2, 1124.2, history.Indeterminate)
	if loss != "" {
		h.point("w2", 2, history.Lose, occ, 73, 1, 1, 1124.5, loss)
	}
	h.ledger("w1", 1, history.Reclaim, occ, "w1/c", 89, 1518.8, 1537.1, history.OK)
	h.events[len(h.events)-1].Attempt = 2
	h.point("w1", 1, history.Start, occ, 89, 2, 1, 1537.5, "")
	h.ledger("w0", 3, history.Reclaim, occ, "w0/d", 0, 1655.3, 1674.3, history.Refused)
	h.sink(occ, 89, 1839.5, history.Accepted)
	h.point("w1", 1, history.End, occ, 89, 2, 1, 1840.2, "")
	h.ledger("w1", 1, history.Finish, occ, "w1/c", 89, 1840.3, 1875.5, history.OK)
	h.sink(occ, 73, 3202.9, w2Effect)
	h.point("w2", 2, history.End, occ, 73, 1, 1, 3203.5, "")
	h.ledger("w2", 2, history.Finish, occ, "w2/a", 73, 3203.7, 3267.0, history.Lost)
	return h
}

// (a) The run that failed issue 23: no two leases overlapped, fencing kept
// one effect, the stale run was told and fenced. It passes.
func TestStaleRunAfterLostLeasePasses(t *testing.T) {
	r := overrunCase(history.Rejected, history.Cancelled).check()
	if !r.Pass {
		t.Fatalf("the documented lost-lease case failed: %v", r.Failures)
	}
	if len(r.ExecOverlaps) != 1 || !r.ExecOverlaps[0].Explained {
		t.Fatalf("want one explained overlap, got %+v", r.ExecOverlaps)
	}
	// The same with its context cancelled by the loss itself.
	if r := overrunCase(history.Rejected, history.Lost).check(); !r.Pass {
		t.Fatalf("cancelled with ErrLeaseLost: %v", r.Failures)
	}
}

// (c) The stale run must be fenced and told: its effect accepted over the
// newer token's, its loss never signalled, or its context not cancelled,
// is each a failure.
func TestStaleRunMustBeFencedAndTold(t *testing.T) {
	for _, tc := range []struct {
		name, effect, loss, want string
	}{
		{"effect accepted by the fenced sink", history.Accepted, history.Cancelled, "fenced sink accepted its effect after one of token 89"},
		{"loss never signalled", history.Rejected, "", "never signalled"},
		{"context not cancelled", history.Rejected, history.Running, "context was not cancelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := overrunCase(tc.effect, tc.loss).check()
			if r.Pass || !strings.Contains(strings.Join(r.Failures, "\n"), tc.want) {
				t.Fatalf("failures %q, want one saying %q", r.Failures, tc.want)
			}
		})
	}
}

// (b) Two executions that held unexpired leases at once, by their own
// records, are flagged — whatever faults were applied meanwhile: w1's
// heartbeat at 400 ms was confirmed, so its lease runs to 1400 ms, and the
// ledger granted w2 a reclaim at 910 ms.
func TestOverlapOfUnexpiredLeasesFails(t *testing.T) {
	h := &hist{}
	h.ledger("w1", 1, history.Claim, occ, "w1/a", 5, 170, 180, history.OK)
	h.point("w1", 1, history.Start, occ, 5, 1, 1, 181, "")
	h.ledger("w1", 1, history.Heartbeat, occ, "w1/a", 5, 400, 420, history.OK)
	h.ledger("w2", 2, history.Reclaim, occ, "w2/b", 6, 900, 910, history.OK)
	h.point("w2", 2, history.Start, occ, 6, 2, 1, 911, "")
	h.sink(occ, 5, 1000, history.Accepted)
	h.point("w1", 1, history.End, occ, 5, 1, 1, 1001, "")
	h.sink(occ, 6, 1200, history.Accepted)
	h.point("w2", 2, history.End, occ, 6, 2, 1, 1201, "")
	r := h.check()
	if r.Pass || !strings.Contains(strings.Join(r.Failures, "\n"), "held unexpired leases at once") {
		t.Fatalf("an overlap of two unexpired leases passed: failures %q, overlaps %+v", r.Failures, r.ExecOverlaps)
	}
}

// (d) Policy skip's misfire rule is judged at the claim: a claim sent
// within the grace whose job a starved process started 1.4 s late passes;
// a claim sent 700 ms after its instant (grace 500 ms + tolerance 100 ms)
// that ran fails.
func TestMisfireJudgedAtTheClaim(t *testing.T) {
	h := &hist{}
	h.ledger("w1", 1, history.Claim, occ, "w1/a", 5, 160+400, 160+420, history.OK)
	h.point("w1", 1, history.Start, occ, 5, 1, 1, 160+1400, "")
	h.events[len(h.events)-1].Late = 1400 * ms
	h.point("w1", 1, history.End, occ, 5, 1, 1, 160+1450, "")
	h.ledger("w1", 1, history.Finish, occ, "w1/a", 5, 160+1451, 160+1460, history.OK)
	if r := h.check(); !r.Pass || len(r.LateStarts) != 0 {
		t.Fatalf("a claim sent within the grace and started late by a starved process failed: %v %v", r.Failures, r.LateStarts)
	}
	late := harness.JobName + "@1000260"
	h.ledger("w2", 2, history.Claim, late, "w2/b", 6, 260+700, 260+705, history.OK)
	h.point("w2", 2, history.Start, late, 6, 1, 1, 260+706, "")
	h.point("w2", 2, history.End, late, 6, 1, 1, 260+750, "")
	r := h.check()
	if r.Pass || len(r.LateStarts) != 1 || !strings.Contains(r.LateStarts[0], late) {
		t.Fatalf("a claim sent 700 ms after its instant ran and passed: failures %q, late %q", r.Failures, r.LateStarts)
	}
	// A retry answering "yours" counts from its first attempt's send.
	h = &hist{}
	h.ledger("w1", 1, history.Claim, occ, "w1/a", 0, 160+300, 160+633, history.Indeterminate)
	h.ledger("w1", 1, history.Claim, occ, "w1/a", 5, 160+700, 160+710, history.OK)
	h.point("w1", 1, history.Start, occ, 5, 1, 1, 160+711, "")
	h.point("w1", 1, history.End, occ, 5, 1, 1, 160+750, "")
	if r := h.check(); !r.Pass {
		t.Fatalf("a retry of a claim first sent within the grace failed: %v", r.Failures)
	}
}

// A run's heartbeat answered "lost" before its lease could have ended, by
// the sends the ledger confirmed, is the ledger dropping a live lease;
// one answered after is not.
func TestLeaseLostWhileRenewedInTime(t *testing.T) {
	for _, tc := range []struct {
		call, ret float64
		fails     bool
	}{{700, 720, true}, {1150, 1200, false}} {
		h := &hist{}
		h.ledger("w1", 1, history.Claim, occ, "w1/a", 5, 170, 180, history.OK)
		h.point("w1", 1, history.Start, occ, 5, 1, 1, 181, "")
		h.ledger("w1", 1, history.Heartbeat, occ, "w1/a", 5, 400, 420, history.Indeterminate)
		h.ledger("w1", 1, history.Heartbeat, occ, "w1/a", 5, tc.call, tc.ret, history.Lost)
		h.point("w1", 1, history.Lose, occ, 5, 1, 1, tc.ret+1, history.Lost)
		h.point("w1", 1, history.End, occ, 5, 1, 1, tc.ret+50, "")
		r := h.check()
		if got := len(r.LostInTime) > 0 && !r.Pass; got != tc.fails {
			t.Errorf("heartbeat answered lost at %v ms (lease to 1170 ms): flagged %v, want %v (%v)", tc.ret, got, tc.fails, r.Failures)
		}
	}
}

// TestOccurrenceStripsTheNamespace: the recorder keys ledger operations by
// the backend's job name, namespace included; executions by the job's.
func TestOccurrenceStripsTheNamespace(t *testing.T) {
	for in, want := range map[string]string{
		"chaos329657157:chaos@1796230870800": "chaos@1796230870800",
		"a/b:c:chaos@5":                      "chaos@5",
		"chaos@5":                            "chaos@5",
		"lock":                               "lock",
	} {
		if got := occurrence(in); got != want {
			t.Errorf("occurrence(%q) = %q, want %q", in, got, want)
		}
	}
}

// A worker stopped (SIGSTOP) across its lease's end runs its expired
// timers in any order when it wakes: a job that ends right after waking
// need not have been told of its loss first. One that runs on for longer
// must have been.
func TestStaleRunWokenFromPause(t *testing.T) {
	pausedTo := func(to float64) func(*harness.Run) {
		return func(r *harness.Run) {
			r.Applied = []harness.Fault{{Kind: harness.FaultPause, Target: "w2", From: 900 * ms, To: int64(to * float64(ms))}}
		}
	}
	// w2's run ends at 3203.5 ms, without a Lose event.
	if r := overrunCase(history.Rejected, "").check(pausedTo(3200)); !r.Pass {
		t.Fatalf("a run that ended as its worker woke from a pause failed: %v", r.Failures)
	}
	if r := overrunCase(history.Rejected, "").check(pausedTo(2000)); r.Pass {
		t.Fatalf("a run that went on 1.2 s after its worker woke, never told of its lost lease, passed")
	}
}

// A scheduler that stops renewing a run's lease while the job still runs
// (the old overrun bug: heartbeats stopped at the job's timeout) loses the
// lease with nothing to explain it: the stale run fails even though it was
// told and fenced.
func TestStaleRunWhoseRenewalsStopped(t *testing.T) {
	h := overrunCase(history.Rejected, history.Cancelled)
	var kept []history.Event
	for _, e := range h.events {
		if e.Kind != history.Heartbeat {
			kept = append(kept, e)
		}
	}
	h.events = kept
	r := h.check()
	if r.Pass || !strings.Contains(strings.Join(r.Failures, "\n"), "stopped renewing") {
		t.Fatalf("a run whose heartbeats stopped while it ran passed: %q", r.Failures)
	}
}
