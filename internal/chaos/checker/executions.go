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

// lateSlack is what a start may exceed its misfire grace by: the time
// between the scheduler's check and the job function's first line, which a
// loaded host (a race-enabled build on two cores) can stretch. The late
// starts this rule exists for are late by a pause or a step: seconds.
const lateSlack = 300 * time.Millisecond

// Exec is one execution of a job function: from its Start event to its
// End event, or to its process's last event if it never returned (killed).
type Exec struct {
	Job     string        `json:"job"`
	Key     string        `json:"key"`
	Process string        `json:"proc"`
	PID     int           `json:"pid"`
	Token   uint64        `json:"token,string"`
	Attempt int           `json:"attempt"`
	Start   int64         `json:"start"`
	End     int64         `json:"end"`
	Late    time.Duration `json:"late"`
	Ended   bool          `json:"ended"` // its End event was recorded
	// Disturbed: a fault could have cost its lease while it ran (its worker
	// paused or partitioned, every worker paused, the backend restarted, or
	// one of its heartbeats failed or timed out), which no lock service can
	// stop: a later execution beside it is then explained. A scheduler
	// that stops heartbeating a run still running is not disturbed.
	Disturbed bool `json:"disturbed"`
}

// ExecOverlap is two executions of one occurrence at once, or more
// executions of a job at once than its MaxConcurrent.
type ExecOverlap struct {
	Job       string   `json:"job"`
	Keys      []string `json:"keys"` // the executions' occurrences, with token
	At        int64    `json:"at"`
	Explained bool     `json:"explained"` // every execution but one was disturbed
}

// executions joins Start and End events into executions and marks those a
// fault disturbed.
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
		switch e.Kind {
		case history.Start:
			job, _, _ := strings.Cut(e.Key, "@")
			open[id{e.PID, e.Key, e.Token, e.Op}] = len(out)
			out = append(out, Exec{Job: job, Key: e.Key, Process: e.Process, PID: e.PID, Token: e.Token, Attempt: e.Attempt,
				Start: e.T, Late: time.Duration(e.Late)})
		case history.End:
			if i, ok := open[id{e.PID, e.Key, e.Token, e.Op}]; ok {
				out[i].End, out[i].Ended = e.T, true
				delete(open, id{e.PID, e.Key, e.Token, e.Op})
			}
		}
	}
	// Heartbeats of a run that did not succeed: the backend, not the
	// scheduler, put its lease at risk (a slow or failed reply), and a job
	// that does not watch its context goes on after losing it.
	failedBeats := map[string][]int64{}
	for _, op := range c.ops {
		if op.Kind == history.Heartbeat && op.Result != history.OK {
			k := op.Key + "#" + strconv.FormatUint(op.Token, 10) + "#" + strconv.Itoa(op.PID)
			failedBeats[k] = append(failedBeats[k], op.Call)
		}
	}
	for i := range out {
		x := &out[i]
		if !x.Ended {
			x.End = last[x.PID]
		}
		x.End = max(x.End, x.Start+1) // killed right after its start: it still ends
		x.Disturbed = c.disturbed(*x)
		for _, t := range failedBeats[x.Key+"#"+strconv.FormatUint(x.Token, 10)+"#"+strconv.Itoa(x.PID)] {
			if t >= x.Start && t <= x.End {
				x.Disturbed = true
			}
		}
	}
	return out
}

// disturbed reports whether a fault that can cost a running job its lease
// hit x's worker (or every worker, or the backend) while x ran. A
// partition's effect outlasts it by up to a TTL (a heartbeat in flight).
func (c *check) disturbed(x Exec) bool {
	ttl := int64(c.run.TTL)
	for _, f := range c.run.Applied {
		var hit bool
		switch f.Kind {
		case harness.FaultPause, harness.FaultPartition:
			hit = f.Target == x.Process
		case harness.FaultPauseAll, harness.FaultRestartBackend:
			hit = true
		}
		if hit && f.From <= x.End && f.To+ttl >= x.Start {
			return true
		}
	}
	return false
}

// execRules judges the executions: starts past the misfire grace,
// occurrences a forward clock step jumped over that ran anyway, two
// executions of one occurrence at once, and more executions of a job at
// once than its limit.
func (c *check) execRules() {
	execs := c.executions()
	grace := c.run.JobGrace
	for _, x := range execs {
		if grace > 0 && x.Attempt == 1 && x.Late > grace+lateSlack {
			c.r.LateStarts = append(c.r.LateStarts, fmt.Sprintf("%s (token %d, %s) started %v late (grace %v)",
				x.Key, x.Token, x.Process, x.Late.Round(time.Millisecond), grace))
		}
	}
	c.jumpedOver(execs)
	byKey := map[string][]Exec{}
	byJob := map[string][]Exec{}
	for _, x := range execs {
		byKey[x.Key] = append(byKey[x.Key], x)
		byJob[x.Job] = append(byJob[x.Job], x)
	}
	for _, xs := range byKey {
		for _, o := range concurrent(xs, 1) {
			c.r.ExecOverlaps = append(c.r.ExecOverlaps, o)
		}
	}
	for job, limit := range c.run.Limits {
		if limit > 0 {
			c.r.LimitExceeded = append(c.r.LimitExceeded, concurrent(byJob[job], limit)...)
		}
	}
	sort.Slice(c.r.ExecOverlaps, func(i, j int) bool { return c.r.ExecOverlaps[i].At < c.r.ExecOverlaps[j].At })
	sort.Slice(c.r.LimitExceeded, func(i, j int) bool { return c.r.LimitExceeded[i].At < c.r.LimitExceeded[j].At })
}

// concurrent returns each instant at which more than limit of xs ran at
// once (one entry per excess episode). The episode is explained when at
// most limit of the executions running then were undisturbed.
func concurrent(xs []Exec, limit int) []ExecOverlap {
	type edge struct {
		t     int64
		start bool
		i     int
	}
	var edges []edge
	for i, x := range xs {
		edges = append(edges, edge{x.Start, true, i}, edge{x.End, false, i})
	}
	sort.Slice(edges, func(a, b int) bool {
		if edges[a].t != edges[b].t {
			return edges[a].t < edges[b].t
		}
		return !edges[a].start // ends first: back to back is no overlap
	})
	var out []ExecOverlap
	running := map[int]bool{}
	inEpisode := false
	for _, e := range edges {
		if !e.start {
			delete(running, e.i)
			if len(running) <= limit {
				inEpisode = false
			}
			continue
		}
		running[e.i] = true
		if len(running) <= limit || inEpisode {
			continue
		}
		inEpisode = true
		o := ExecOverlap{Job: xs[e.i].Job, At: e.t}
		undisturbed := 0
		for i := range running {
			x := xs[i]
			o.Keys = append(o.Keys, x.Key+"#"+strconv.FormatUint(x.Token, 10)+"@"+x.Process)
			if !x.Disturbed {
				undisturbed++
			}
		}
		sort.Strings(o.Keys)
		o.Explained = undisturbed <= limit
		out = append(out, o)
	}
	return out
}

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
			_, ms, _ := strings.Cut(x.Key, "@")
			inst, err := strconv.ParseInt(ms, 10, 64)
			if err == nil && inst > from && inst < to {
				c.r.JumpedOverRan = append(c.r.JumpedOverRan, fmt.Sprintf("%s ran (token %d, %s) though a %v clock step jumped over it", x.Key, x.Token, x.Process, step))
			}
		}
	}
}

// wallAt maps a CLOCK_MONOTONIC instant to Unix ms, by the workload
// window's two readings.
func (c *check) wallAt(mono int64) int64 {
	return c.run.WindowWall[0] + (mono-c.run.WindowMono[0])/int64(time.Millisecond)
}

// execVerdict adds the execution rules' failures. Starts past the grace and
// jumped-over runs are the scheduler's own decisions: they fail on every
// backend. Executions beside each other that no fault explains (a restart
// of the backend explains them) fail where the backend declares safe
// leases.
func (c *check) execVerdict(fail, pred func(string, ...any)) {
	r, caps := c.r, c.run.Capabilities
	if n := len(r.LateStarts); n > 0 {
		fail("%d occurrences started later than their misfire grace %v under policy skip (first: %s)", n, c.run.JobGrace, r.LateStarts[0])
	}
	if n := len(r.JumpedOverRan); n > 0 {
		fail("%d occurrences ran that a forward clock step jumped over (misfires under policy skip; first: %s)", n, r.JumpedOverRan[0])
	}
	judge := func(what string, os []ExecOverlap) {
		var un []ExecOverlap
		for _, o := range os {
			if !o.Explained {
				un = append(un, o)
			}
		}
		if len(un) == 0 {
			return
		}
		msg := fmt.Sprintf("%d times %s with no fault to explain it (first: %s)", len(un), what, strings.Join(un[0].Keys, ", "))
		if caps.SafeFencing {
			fail("%s", msg)
		} else {
			pred("%s (backend declares SafeFencing=%v DurableFencing=%v)", msg, caps.SafeFencing, caps.DurableFencing)
		}
	}
	judge("two executions of one occurrence ran at once", r.ExecOverlaps)
	judge("a job ran more executions at once than its max_concurrent", r.LimitExceeded)
}
