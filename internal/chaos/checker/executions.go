package checker

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/chaos/harness"
	"github.com/leasehold/leasehold/internal/chaos/history"
)

// Exec is one execution of a job function: from its Start event to its
// End event, or to its process's last event if it never returned (killed).
type Exec struct {
	Job     string `json:"job"`
	Key     string `json:"key"`
	Process string `json:"proc"`
	PID     int    `json:"pid"`
	Token   uint64 `json:"token,string"`
	Attempt int    `json:"attempt"`
	Start   int64  `json:"start"`
	End     int64  `json:"end"`
	Ended   bool   `json:"ended"` // its End event was recorded
	// Late is how late the job function started (Start event): the
	// scheduler's decision was taken earlier, at the claim, so this is
	// shown, not judged.
	Late time.Duration `json:"late"`
	// Owner and Claimed are the owner and first attempt's send time of the
	// claim or reclaim that won the execution its lease (empty and 0 if
	// none was recorded).
	Owner   string `json:"owner,omitempty"`
	Claimed int64  `json:"claimed,omitempty"`
	// LeaseEnd is when the execution's lease ends by its own record: the
	// latest send time of its grant or of a heartbeat the backend
	// confirmed, plus the TTL granted. A correct ledger grants the
	// occurrence to nobody else before then (it counts from when it
	// applied the request, which is later). The End if no grant was
	// recorded.
	LeaseEnd int64 `json:"lease_end"`
	// Renewing: a heartbeat was sent after the last confirmed one (or the
	// grant) by its lease's end, give or take signalGrace: the lease ended
	// because renewals failed or came late, not because the scheduler
	// stopped sending them while the job ran.
	Renewing bool `json:"renewing"`
	// LossAt is when the worker saw the lease lost (Run.LeaseLost closed;
	// 0: never while the job ran) and LossResult how the job's context
	// stood then (history.Lost, Cancelled or Running).
	LossAt     int64  `json:"loss_at,omitempty"`
	LossResult string `json:"loss_result,omitempty"`
}

// heldUntil is when the execution stopped running on an unexpired lease:
// at its end or its lease's end, whichever is first.
func (x Exec) heldUntil() int64 { return min(x.End, x.LeaseEnd) }

// ExecOverlap is two executions of one occurrence at once, or more
// executions of a job at once than its MaxConcurrent.
type ExecOverlap struct {
	Job  string   `json:"job"`
	Keys []string `json:"keys"` // the executions' occurrences, with token
	At   int64    `json:"at"`
	// Explained: at most the allowed number of the executions held an
	// unexpired lease at any instant, and every one that ran on after its
	// lease had ended is a stale run that did what a lost lease demands
	// (Why says what failed when not explained).
	Explained     bool   `json:"explained"`
	Why           string `json:"why,omitempty"`
	AcrossRestart bool   `json:"across_restart,omitempty"`
}

// executions joins Start, End and Lose events into executions and gives
// each its lease (leases).
func (c *check) executions() []Exec {
	type id struct {
		pid   int
		key   string
		token uint64
		op    uint64 // the execution's number in its process (0 in older histories)
	}
	last := map[int]int64{} // pid → its last event
	open := map[id]int{}
	var out []Exec
	for _, e := range c.events {
		if e.PID != 0 {
			last[e.PID] = max(last[e.PID], e.T)
		}
		i, running := open[id{e.PID, e.Key, e.Token, e.Op}]
		switch {
		case e.Kind == history.Start:
			job, _, _ := strings.Cut(e.Key, "@")
			open[id{e.PID, e.Key, e.Token, e.Op}] = len(out)
			out = append(out, Exec{Job: job, Key: e.Key, Process: e.Process, PID: e.PID, Token: e.Token, Attempt: e.Attempt,
				Start: e.T, Late: time.Duration(e.Late)})
		case e.Kind == history.Lose && running && out[i].LossAt == 0:
			out[i].LossAt, out[i].LossResult = e.T, e.Result
		case e.Kind == history.End && running:
			out[i].End, out[i].Ended = e.T, true
			delete(open, id{e.PID, e.Key, e.Token, e.Op})
		}
	}
	for i := range out {
		x := &out[i]
		if !x.Ended {
			x.End = last[x.PID]
		}
		x.End = max(x.End, x.Start+1) // killed right after its start: it still ends
	}
	c.leases(out)
	return out
}

// execRules judges the executions: claims won past the misfire grace that
// ran, occurrences a forward clock step jumped over that ran anyway, two
// executions of one occurrence at once, and more executions of a job at
// once than its limit.
func (c *check) execRules() {
	execs := c.executions()
	c.lateClaims(execs)
	c.jumpedOver(execs)
	byKey := map[string][]Exec{}
	byJob := map[string][]Exec{}
	for _, x := range execs {
		byKey[x.Key] = append(byKey[x.Key], x)
		byJob[x.Job] = append(byJob[x.Job], x)
	}
	for _, xs := range byKey {
		c.r.ExecOverlaps = append(c.r.ExecOverlaps, c.judgeConcurrent(xs, 1)...)
	}
	for job, limit := range c.run.Limits {
		if limit > 0 {
			c.r.LimitExceeded = append(c.r.LimitExceeded, c.judgeConcurrent(byJob[job], limit)...)
		}
	}
	sort.Slice(c.r.ExecOverlaps, func(i, j int) bool { return c.r.ExecOverlaps[i].At < c.r.ExecOverlaps[j].At })
	sort.Slice(c.r.LimitExceeded, func(i, j int) bool { return c.r.LimitExceeded[i].At < c.r.LimitExceeded[j].At })
}

// lateClaims finds first attempts whose claim was sent later than the
// misfire grace (plus the claim tolerance) after the occurrence's instant,
// by the host's clock, and ran. This is where policy skip's promise is
// made: the ledger refuses such a claim (ErrTooLate: it applies the claim
// after it was sent), and a claim won late is recorded failed, not run.
// When the job function got to run is not judged: a starved process
// starts a claim won on time late, and nothing can promise otherwise.
func (c *check) lateClaims(execs []Exec) {
	grace := c.run.JobGrace
	if grace <= 0 || len(c.run.WindowMono) < 1 || c.run.WindowWall[0] == 0 {
		return
	}
	allowed := grace + c.run.ClaimTolerance + time.Duration(slackFor(c.run.TTL))
	for _, x := range execs {
		if x.Attempt != 1 || x.Claimed == 0 {
			continue
		}
		inst, ok := instant(x.Key)
		if !ok {
			continue
		}
		late := time.Duration(c.wallAtNS(x.Claimed) - inst*int64(time.Millisecond))
		if late > allowed {
			c.r.LateStarts = append(c.r.LateStarts, fmt.Sprintf("%s (token %d, %s) was claimed %v after its instant and ran (grace %v, claim tolerance %v)",
				x.Key, x.Token, x.Process, late.Round(time.Millisecond), grace, c.run.ClaimTolerance))
		}
	}
}

// instant is an occurrence key's instant, in Unix ms.
func instant(key string) (int64, bool) {
	_, ms, ok := strings.Cut(key, "@")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	return n, err == nil
}

// lateSlack narrows the window of instants a clock step jumped over at
// both ends: the scheduler's wake-up that sees the step comes some time
// after it, which a loaded host (a race-enabled build on two cores) can
// stretch.
const lateSlack = 300 * time.Millisecond

// jumpedOver finds runs of occurrences that a forward clock step made every
// worker jump over: under misfire policy skip none of them may run (each
// worker saw them due at once, late by the step).
func (c *check) jumpedOver(execs []Exec) {
	grace := c.run.JobGrace
	if grace <= 0 {
		return
	}
	for _, f := range c.run.Applied {
		if f.Kind != harness.FaultClockStep || f.Step == 0 {
			continue
		}
		// The forward step is the step at From, or the step back at
		// StepBack. The instants it jumps over lie between the clocks'
		// time before it (real time, or real time less the step when the
		// clocks had been stepped back) and after it, less the grace.
		at, step, before := f.From, f.Step, int64(0)
		if step < 0 {
			at, step, before = f.StepBack, -step, f.Step.Milliseconds()
		}
		if at == 0 {
			continue
		}
		// After a step back shorter than the step, the window would reach
		// back before the first step, to instants that ran on time then.
		base := max(c.wallAt(at)+before, c.wallAt(f.From))
		from := base + (grace + lateSlack).Milliseconds()
		to := c.wallAt(at) + before + (step - grace - lateSlack).Milliseconds()
		for _, x := range execs {
			if x.Attempt != 1 || x.Job != harness.JobName {
				continue
			}
			if inst, ok := instant(x.Key); ok && inst > from && inst < to {
				c.r.JumpedOverRan = append(c.r.JumpedOverRan, fmt.Sprintf("%s ran (token %d, %s) though a %v clock step jumped over it", x.Key, x.Token, x.Process, step))
			}
		}
	}
}

// wallAt maps a CLOCK_MONOTONIC instant to Unix ms, by the workload
// window's first readings.
func (c *check) wallAt(mono int64) int64 { return c.wallAtNS(mono) / int64(time.Millisecond) }

// wallAtNS maps a CLOCK_MONOTONIC instant to Unix ns.
func (c *check) wallAtNS(mono int64) int64 {
	return c.run.WindowWall[0]*int64(time.Millisecond) + mono - c.run.WindowMono[0]
}

// execVerdict adds the execution rules' failures. Claims won past the
// grace that ran and jumped-over runs are the scheduler's own decisions:
// they fail on every backend. Executions beside each other that held
// unexpired leases at once, stale runs that were not told of their loss or
// whose effect fencing let through, and leases lost while their holder was
// renewing in time fail where the backend declares safe leases (predicted
// across a restart of a backend without durable fencing).
func (c *check) execVerdict(fail, pred func(string, ...any)) {
	r, caps := c.r, c.run.Capabilities
	predictedRestart := len(c.restarts) > 0 && !caps.DurableFencing
	if n := len(r.LateStarts); n > 0 {
		fail("%d occurrences ran whose claim was sent later than their misfire grace %v (+ claim tolerance %v) under policy skip (first: %s)",
			n, c.run.JobGrace, c.run.ClaimTolerance, r.LateStarts[0])
	}
	if n := len(r.JumpedOverRan); n > 0 {
		fail("%d occurrences ran that a forward clock step jumped over (misfires under policy skip; first: %s)", n, r.JumpedOverRan[0])
	}
	judge := func(what string, os []ExecOverlap) {
		var un, unRestart []ExecOverlap
		for _, o := range os {
			switch {
			case o.Explained:
			case o.AcrossRestart && predictedRestart:
				unRestart = append(unRestart, o)
			default:
				un = append(un, o)
			}
		}
		if len(un) > 0 {
			msg := fmt.Sprintf("%d times %s that a lost lease does not explain (first: %s: %s)", len(un), what, strings.Join(un[0].Keys, ", "), un[0].Why)
			if caps.SafeFencing {
				fail("%s", msg)
			} else {
				pred("%s (backend declares SafeFencing=%v DurableFencing=%v)", msg, caps.SafeFencing, caps.DurableFencing)
			}
		}
		if len(unRestart) > 0 {
			pred("%d times %s across a restart of a backend that declares DurableFencing=false", len(unRestart), what)
		}
	}
	judge("two executions of one occurrence ran at once", r.ExecOverlaps)
	judge("a job ran more executions at once than its max_concurrent", r.LimitExceeded)
	var lost, lostRestart []LostInTime
	for _, l := range r.LostInTime {
		if l.AcrossRestart && predictedRestart {
			lostRestart = append(lostRestart, l)
		} else {
			lost = append(lost, l)
		}
	}
	if len(lost) > 0 {
		msg := fmt.Sprintf("%d runs' leases were answered lost while their holder renewed them in time (first: %s)", len(lost), lost[0])
		if caps.SafeFencing {
			fail("%s", msg)
		} else {
			pred("%s (backend declares SafeFencing=false)", msg)
		}
	}
	if len(lostRestart) > 0 {
		pred("%d runs' leases were lost in time across a restart of a backend that declares DurableFencing=false", len(lostRestart))
	}
}
