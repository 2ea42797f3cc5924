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

// The rules for executions that run beside each other, judged by what the
// lease promises, where it promises it:
//
//   - Two executions of one occurrence (or more of a job than its
//     MaxConcurrent) never hold unexpired leases at once, each lease's end
//     taken from its holder's own record: the send time of its grant or of
//     the last heartbeat the backend confirmed, plus the TTL granted. A
//     correct ledger counts the lease from when it applied the request,
//     which is later, so it cannot grant the occurrence again before.
//   - A lease is not taken from a holder that renews it in time: a
//     heartbeat or finish answered "lost" before the lease's end by that
//     record is the ledger dropping a live lease.
//   - An execution that runs on after its lease ended while another holds
//     it is a stale run — a process starved, paused or ignoring its context
//     past its lease, which no lock service can stop. Its scheduler must
//     have kept renewing the lease while it ran (the lease ended because
//     renewals failed), it must have been told (Run.LeaseLost closed, its
//     context cancelled: with ErrLeaseLost, or earlier by its timeout), and
//     the fenced sink must not take its effect over a newer token's.

// LostInTime is a run's heartbeat or finish that the ledger answered
// "lease lost" before the run's lease could have ended by its own record.
type LostInTime struct {
	Key           string `json:"key"`
	Token         uint64 `json:"token,string"`
	Process       string `json:"proc"`
	Kind          string `json:"kind"`      // heartbeat or finish
	At            int64  `json:"at"`        // the answer's return
	LeaseEnd      int64  `json:"lease_end"` // by the sends before it
	AcrossRestart bool   `json:"across_restart,omitempty"`
}

func (l LostInTime) String() string {
	return fmt.Sprintf("%s answered lost for %s token %d (%s) %v before its lease's end", l.Kind, l.Key, l.Token, l.Process,
		time.Duration(l.LeaseEnd-l.At).Round(time.Millisecond))
}

// occurrence strips the ledger's namespace from an occurrence key as the
// recorder writes it (namespace:job@ms, the backend's job name) to give the
// key the executions use (job@ms).
func occurrence(key string) string {
	at := strings.IndexByte(key, '@')
	if at < 0 {
		return key
	}
	if i := strings.LastIndexByte(key[:at], ':'); i >= 0 {
		return key[i+1:]
	}
	return key
}

// leases gives every execution the owner, first send time and end of the
// lease it ran under, and records the runs' leases answered lost in time
// (LostInTime).
func (c *check) leases(execs []Exec) {
	type runID struct {
		pid   int
		key   string
		token uint64
	}
	grants := map[runID]Op{}
	for _, op := range c.firstAttempts() {
		if (op.Kind == history.Claim || op.Kind == history.Reclaim) && op.Result == history.OK {
			id := runID{op.PID, occurrence(op.Key), op.Token}
			if g, ok := grants[id]; !ok || op.Call < g.Call {
				grants[id] = op
			}
		}
	}
	renewals := map[string][]Op{} // owner#token → its heartbeats and finishes
	for _, op := range c.ops {
		if op.Kind == history.Heartbeat || op.Kind == history.Finish {
			k := op.Owner + "#" + strconv.FormatUint(op.Token, 10)
			renewals[k] = append(renewals[k], op)
		}
	}
	slack := slackFor(c.run.TTL)
	for i := range execs {
		x := &execs[i]
		g, ok := grants[runID{x.PID, x.Key, x.Token}]
		if !ok {
			x.LeaseEnd, x.Renewing = x.End, true // no grant recorded: held for all it ran
			continue
		}
		x.Owner, x.Claimed, x.LeaseEnd = g.Owner, g.Call, g.Call+g.Granted
		rs := renewals[g.Owner+"#"+strconv.FormatUint(g.Token, 10)]
		sort.Slice(rs, func(a, b int) bool { return rs[a].Call < rs[b].Call })
		finishUnknown := false // a Finish of unknown outcome may have finished the run: a retry is then answered lost
		lastOK := g.Call
		for _, op := range rs {
			if op.Kind == history.Heartbeat && op.Call > lastOK && op.Call <= x.LeaseEnd+signalGrace(c.run.TTL) {
				x.Renewing = true
			}
			switch {
			case op.Kind == history.Heartbeat && op.Result == history.OK:
				if op.Call+op.Granted > x.LeaseEnd {
					x.LeaseEnd, lastOK, x.Renewing = op.Call+op.Granted, op.Call, false
				}
			case op.Result == history.Lost && !(op.Kind == history.Finish && finishUnknown) && op.Ret+slack < x.LeaseEnd:
				c.r.LostInTime = append(c.r.LostInTime, LostInTime{Key: x.Key, Token: x.Token, Process: x.Process, Kind: op.Kind,
					At: op.Ret, LeaseEnd: x.LeaseEnd, AcrossRestart: c.acrossRestart(op.Call-4*int64(c.run.TTL), op.Ret)})
			}
			if op.Kind == history.Finish && op.Result == history.Indeterminate {
				finishUnknown = true
			}
		}
	}
}

// episode is a stretch of time in which more than the allowed number of
// intervals were open at once: from At to Until, with every interval
// open in it.
type episode struct {
	at, until int64
	members   []int
}

// concurrent returns the episodes in which more than limit of the n
// intervals span(i) = [from, to) were open at once. An empty interval
// (to ≤ from) is never open.
func concurrent(n, limit int, span func(i int) (from, to int64)) []episode {
	type edge struct {
		t     int64
		start bool
		i     int
	}
	var edges []edge
	for i := range n {
		from, to := span(i)
		if to > from {
			edges = append(edges, edge{from, true, i}, edge{to, false, i})
		}
	}
	sort.Slice(edges, func(a, b int) bool {
		if edges[a].t != edges[b].t {
			return edges[a].t < edges[b].t
		}
		return !edges[a].start // ends first: back to back is no overlap
	})
	var out []episode
	running := map[int]bool{}
	var cur *episode
	for _, e := range edges {
		if !e.start {
			delete(running, e.i)
			if cur != nil && len(running) <= limit {
				cur.until = e.t
				out = append(out, *cur)
				cur = nil
			}
			continue
		}
		running[e.i] = true
		switch {
		case cur != nil:
			cur.members = append(cur.members, e.i)
		case len(running) > limit:
			cur = &episode{at: e.t}
			for i := range running {
				cur.members = append(cur.members, i)
			}
			sort.Ints(cur.members)
		}
	}
	return out
}

// judgeConcurrent returns each episode in which more than limit of xs ran
// at once, explained when at most limit of them held unexpired leases at
// any instant in it and every one that ran on past its lease's end while
// another held the lease did what a stale run must.
func (c *check) judgeConcurrent(xs []Exec, limit int) []ExecOverlap {
	slack := slackFor(c.run.TTL)
	running := concurrent(len(xs), limit, func(i int) (int64, int64) { return xs[i].Start, xs[i].End })
	if len(running) == 0 {
		return nil
	}
	held := concurrent(len(xs), limit, func(i int) (int64, int64) { return xs[i].Start, xs[i].heldUntil() - slack })
	var out []ExecOverlap
	for _, ep := range running {
		o := ExecOverlap{Job: xs[ep.members[0]].Job, At: ep.at, Explained: true,
			AcrossRestart: c.acrossRestart(ep.at-4*int64(c.run.TTL), ep.until)}
		for _, i := range ep.members {
			x := xs[i]
			o.Keys = append(o.Keys, x.Key+"#"+strconv.FormatUint(x.Token, 10)+"@"+x.Process)
		}
		sort.Strings(o.Keys)
		for _, h := range held {
			if h.at >= ep.at && h.at < ep.until {
				var who []string
				for _, i := range h.members {
					x := xs[i]
					who = append(who, fmt.Sprintf("token %d (%s) until %s", x.Token, x.Process, c.rel(x.heldUntil())))
				}
				o.Explained, o.Why = false, fmt.Sprintf("%d held unexpired leases at once at %s: %s", len(h.members), c.rel(h.at), strings.Join(who, ", "))
				break
			}
		}
		for _, i := range ep.members {
			if !o.Explained {
				break
			}
			x := xs[i]
			if x.End <= x.LeaseEnd+slack {
				continue // it ended on its lease
			}
			var newer *Exec
			for _, j := range ep.members {
				if y := xs[j]; j != i && y.Start < x.End && y.heldUntil() > x.LeaseEnd {
					newer = &xs[j]
					break
				}
			}
			if newer == nil {
				continue // nobody held the lease while it ran on
			}
			if why := c.staleWhy(x, *newer); why != "" {
				o.Explained, o.Why = false, why
			}
		}
		out = append(out, o)
	}
	return out
}

// staleWhy says what a stale run x (on after its lease ended, while newer
// held it) failed to do, or "" if nothing: it must have been told of the
// loss while it ran, with its context cancelled, and the fenced sink must
// not have taken an effect of its token after one of a greater token.
func (c *check) staleWhy(x, newer Exec) string {
	past := time.Duration(x.End - x.LeaseEnd).Round(time.Millisecond)
	name := fmt.Sprintf("token %d (%s) ran %v past its lease's end while token %d (%s) held it", x.Token, x.Process, past, newer.Token, newer.Process)
	// The loss is signalled by a timer at the holder's deadline. A
	// process stopped then (SIGSTOP) runs its expired timers in any order
	// when it wakes: the job may end before the loss is signalled. One
	// that ran on for signalGrace after it was awake past its lease's end
	// must have been told. A killed worker's run says nothing after its
	// last event.
	awake := c.awake(x.Process, x.LeaseEnd)
	if x.Ended && !x.Renewing && awake == x.LeaseEnd {
		return name + ", and its scheduler had stopped renewing its lease while it ran (no heartbeat after the last confirmed one)"
	}
	if x.Ended && x.End > awake+signalGrace(c.run.TTL) {
		switch x.LossResult {
		case "":
			return name + ", and its lease's loss was never signalled to it (Run.LeaseLost not closed while it ran)"
		case history.Running:
			return name + ", and its context was not cancelled when its lease was lost"
		}
	}
	var highest uint64
	for _, e := range c.fenced {
		if e.Kind != history.Effect || e.Key != x.Key || e.Result != history.Accepted {
			continue
		}
		if e.Token == x.Token && highest > x.Token {
			return fmt.Sprintf("%s, and the fenced sink accepted its effect after one of token %d", name, highest)
		}
		highest = max(highest, e.Token)
	}
	return ""
}

// signalGrace is how long a running process may take to act on its
// lease's expiry timer: a loaded host (a race-enabled build, two cores,
// load 10) delays a process's timers by up to hundreds of milliseconds.
func signalGrace(ttl time.Duration) int64 { return int64(ttl / 2) }

// awake returns the first instant at or after t at which the named worker
// was not stopped by a pause fault (its own, or one of every worker).
func (c *check) awake(proc string, t int64) int64 {
	for moved := true; moved; {
		moved = false
		for _, f := range c.run.Applied {
			if (f.Kind == harness.FaultPause && f.Target == proc || f.Kind == harness.FaultPauseAll) && f.From <= t && t < f.To {
				t, moved = f.To, true
			}
		}
	}
	return t
}

// rel shows a CLOCK_MONOTONIC instant as seconds into the workload window.
func (c *check) rel(mono int64) string {
	return fmt.Sprintf("%+.3fs", float64(mono-c.run.WindowMono[0])/float64(time.Second))
}
