package checker

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/chaos/harness"
	"github.com/leasehold/leasehold/internal/chaos/history"
)

// TestJumpedOverBackStepShorterThanStep: the clock-step fault with a
// negative step steps every worker's clock back by |step| at From and
// forward again at StepBack, d = 2–4 s later. jumpedOver takes the jumped
// instants to be (StepBack−|step|, StepBack] on the wall clock. When d is
// shorter than |step| (|step| 1–3 s, so it happens), the clocks never
// caught up with the instant they were stepped back from: the instants in
// (StepBack−|step|, From] had already run, on time, before any step, and
// the checker fails them as "jumped over". A correct scheduler fails the
// chaos run (flaky).
func TestJumpedOverBackStepShorterThanStep(t *testing.T) {
	const sec = int64(time.Second)
	run := &harness.Run{JobGrace: 500 * time.Millisecond, WindowMono: [2]int64{0, 60 * sec}, WindowWall: [2]int64{1_000_000, 1_060_000},
		Applied: []harness.Fault{{Kind: harness.FaultClockStep, Target: "all", Step: -3 * time.Second,
			From: 10 * sec, To: 12*sec + sec/10, StepBack: 12*sec + sec/10}}}
	// Instant 1,009,900 (mono 9.9 s) ran on time, 100 ms before the clocks were first stepped.
	c := &check{run: run, r: &Report{}, events: []history.Event{
		{Kind: history.Start, Key: harness.JobName + "@1009900", PID: 1, Process: "w0", Token: 7, Attempt: 1, T: 9900 * int64(time.Millisecond), Op: 1},
		{Kind: history.End, Key: harness.JobName + "@1009900", PID: 1, Process: "w0", Token: 7, Attempt: 1, T: 9950 * int64(time.Millisecond), Op: 1},
	}}
	c.execRules()
	if len(c.r.JumpedOverRan) > 0 {
		t.Errorf("an occurrence that ran on time before any clock step is reported jumped over: %v", c.r.JumpedOverRan)
	}
}

// TestKilledRightAfterStartIsNoOverlap: a worker killed right after its
// start event (its last event) ran for no time; a reclaim a second later
// is not beside it. Its end once equalled its start, and the sweep left it
// running for ever (seed 2 on Redis failed so).
func TestKilledRightAfterStartIsNoOverlap(t *testing.T) {
	c := &check{run: &harness.Run{TTL: time.Second}, r: &Report{}, events: []history.Event{
		{T: 100, Process: "w1", PID: 1, Phase: history.Point, Kind: history.Start, Key: "chaos@5", Token: 20, Attempt: 1, Op: 1},
		{T: 2000, Process: "w3", PID: 3, Phase: history.Point, Kind: history.Start, Key: "chaos@5", Token: 32, Attempt: 2, Op: 1},
		{T: 3000, Process: "w3", PID: 3, Phase: history.Point, Kind: history.End, Key: "chaos@5", Token: 32, Attempt: 2, Op: 1},
	}}
	c.execRules()
	if len(c.r.ExecOverlaps) != 0 {
		t.Fatalf("overlaps %+v", c.r.ExecOverlaps)
	}
}
