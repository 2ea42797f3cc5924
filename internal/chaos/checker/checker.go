// Package checker judges a chaos run (package harness) from what every
// process recorded: duplicate effects at the fenced sink, occurrences
// missed, overlapping lease grants, writes the fenced sink rejected (stale
// holders caught by fencing), token regressions, and linearizability of the
// lease operations (porcupine, against a lease model that knows expiry). It
// writes a text summary, JSON and an HTML timeline.
//
// Each anomaly is judged against what the backend declares
// (backend.Capabilities): a backend without durable fencing whose server was
// restarted empty is predicted to regress tokens and grant a live key again;
// the checker reports those as the predicted anomaly, anything else as a
// failure.
package checker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/internal/chaos/harness"
	"github.com/leasehold/leasehold/internal/chaos/history"
)

// Op is one backend operation: a call joined with its return.
type Op struct {
	Process   string `json:"proc"`
	PID       int    `json:"pid"`
	Kind      string `json:"kind"`
	Key       string `json:"key"`
	Owner     string `json:"owner"`
	Token     uint64 `json:"token,string"` // the caller's (renew, release...) or the grant's (acquire, claim)
	TTL       int64  `json:"ttl"`          // requested
	Granted   int64  `json:"granted"`      // granted TTL on OK
	Call      int64  `json:"call"`
	Ret       int64  `json:"ret"` // the history's end if it never returned
	Result    string `json:"result"`
	HeldToken uint64 `json:"held_token,string,omitempty"`
	Attempt   int    `json:"attempt,omitempty"`
	Returned  bool   `json:"returned"`
}

// Report is the checker's result.
type Report struct {
	Run *harness.Run `json:"run"`

	Ops           map[string]map[string]int `json:"ops"` // kind → result → count
	Expected      int                       `json:"occurrences_expected"`
	Ran           int                       `json:"occurrences_ran"` // with an accepted effect at the fenced sink
	Missed        []string                  `json:"missed,omitempty"`
	MissedInFault int                       `json:"missed_during_faults"`
	// LongestMiss is the longest run of consecutive missed occurrences, in
	// schedule time: a liveness figure (no claim for that long).
	LongestMiss time.Duration `json:"longest_miss"`

	FencedAccepted     int   `json:"fenced_accepted"`
	FencedRejected     int   `json:"fenced_rejected"`       // stale holders caught by fencing
	RejectedLocks      int   `json:"fenced_rejected_locks"` // of which on lock keys
	FencedDuplicates   []Dup `json:"fenced_duplicates,omitempty"`
	UnfencedDuplicates int   `json:"unfenced_duplicates"` // occurrences with more than one unfenced effect
	CaughtByFencing    int   `json:"caught_by_fencing"`   // of those, the fenced sink accepted exactly one

	Regressions []Regression `json:"token_regressions,omitempty"`
	Overlaps    []Overlap    `json:"overlapping_grants,omitempty"`

	// LateStarts: first attempts that ran though their claim was sent
	// later than the misfire grace (plus the claim tolerance) after their
	// instant, by the host's clock (policy skip). When a starved process
	// got to start the job function is not judged.
	LateStarts []string `json:"late_starts,omitempty"`
	// JumpedOverRan: occurrences a forward clock step of every worker
	// jumped over (misfires under policy skip) that ran anyway.
	JumpedOverRan []string `json:"jumped_over_ran,omitempty"`
	// ExecOverlaps: two executions of one occurrence running at once, on
	// the workers' own Start/End records; LimitExceeded: more executions
	// of a job at once than its MaxConcurrent. Explained when no more than
	// the allowed ones held unexpired leases at once and the others were
	// stale runs told of their lost lease and fenced (see leases.go).
	ExecOverlaps  []ExecOverlap `json:"exec_overlaps,omitempty"`
	LimitExceeded []ExecOverlap `json:"limit_exceeded,omitempty"`
	// LostInTime: runs' heartbeats or finishes answered "lease lost"
	// before the lease could have ended by the run's own record.
	LostInTime []LostInTime `json:"lost_in_time,omitempty"`

	Linearizable string `json:"linearizable"` // Ok, Illegal, Unknown (timed out)
	LeaseOps     int    `json:"lease_ops"`
	// StraddlingRestart: lease operations that overlap a restart of a
	// backend without durable fencing, taken as indeterminate in the spans
	// on both sides (each span between restarts is checked on its own).
	StraddlingRestart int `json:"straddling_restart,omitempty"`
	// HeldAnswersOnly: the history is linearizable once Held answers are
	// taken as "not applied": the backend's Held answers named a non-holder
	// or came while the key was free, and no grant, token, renewal or
	// release was wrong. A warning, not a failure.
	HeldAnswersOnly bool `json:"held_answers_only,omitempty"`

	Failures  []string `json:"failures,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
	Predicted []string `json:"predicted,omitempty"`
	Pass      bool     `json:"pass"`
}

// Dup is an occurrence whose effect the fenced sink accepted more than once.
type Dup struct {
	Key    string   `json:"key"`
	Tokens []uint64 `json:"tokens"`
	// Explained: every earlier run's lease was lost before it could record
	// its outcome (Finish not OK): an at-least-once re-execution under crash
	// policy retry, which only an idempotent sink makes exactly-once. Not
	// explained: a run that had finished was run again, or two runs shared
	// a token.
	Explained bool `json:"explained"`
}

// Regression is a grant whose token is not greater than that of a grant
// that completed before it was requested.
type Regression struct {
	Scope         string `json:"scope"` // lease key, or job name for claims
	Earlier       uint64 `json:"earlier,string"`
	Later         uint64 `json:"later,string"`
	At            int64  `json:"at"`
	AcrossRestart bool   `json:"across_restart"`
}

// Overlap is a grant made while another owner's lease was provably live.
type Overlap struct {
	Key           string `json:"key"`
	Holder        string `json:"holder"`
	Grantee       string `json:"grantee"`
	LiveFor       int64  `json:"live_for_ns"` // how much longer the holder's lease had, at least
	At            int64  `json:"at"`
	AcrossRestart bool   `json:"across_restart"`
}

// Options tune the check.
type Options struct {
	// LinearizabilityTimeout bounds porcupine (default 60 s); past it the
	// result is Unknown.
	LinearizabilityTimeout time.Duration
}

// Check reads the run in dir and judges it.
func Check(dir string, opt Options) (*Report, error) {
	if opt.LinearizabilityTimeout == 0 {
		opt.LinearizabilityTimeout = 60 * time.Second
	}
	raw, err := os.ReadFile(filepath.Join(dir, harness.RunFile))
	if err != nil {
		return nil, fmt.Errorf("checker: %w", err)
	}
	var run harness.Run
	if err := json.Unmarshal(raw, &run); err != nil {
		return nil, fmt.Errorf("checker: %s: %w", harness.RunFile, err)
	}
	events, err := history.ReadFile(filepath.Join(dir, harness.HistoryFile))
	if err != nil {
		return nil, err
	}
	fenced, err := history.ReadFile(filepath.Join(dir, harness.SinkFile))
	if err != nil {
		return nil, err
	}
	unfenced, err := history.ReadFile(filepath.Join(dir, harness.UnfencedFile))
	if err != nil {
		return nil, err
	}
	c := &check{run: &run, events: events, fenced: fenced, r: &Report{Run: &run, Ops: map[string]map[string]int{}}}
	c.ops = joinOps(events)
	for _, op := range c.ops {
		if c.r.Ops[op.Kind] == nil {
			c.r.Ops[op.Kind] = map[string]int{}
		}
		c.r.Ops[op.Kind][op.Result]++
	}
	for _, f := range run.Applied {
		if f.Kind == harness.FaultRestartBackend {
			c.restarts = append(c.restarts, [2]int64{f.From, f.To})
		}
	}
	c.effects(fenced, unfenced)
	c.missed(fenced)
	c.regressions()
	c.overlaps()
	c.execRules()
	info := c.linearizability(opt.LinearizabilityTimeout)
	c.verdict()
	if err := c.write(dir, info); err != nil {
		return c.r, err
	}
	return c.r, nil
}

type check struct {
	run      *harness.Run
	events   []history.Event
	fenced   []history.Event // the fenced sink's record, in the order it saw the writes
	ops      []Op
	restarts [][2]int64
	r        *Report
}

// joinOps pairs call and return events. An operation without a return
// (its process was killed) ends at the history's last instant, as
// indeterminate.
func joinOps(events []history.Event) []Op {
	type id struct {
		proc string
		pid  int
		op   uint64
	}
	var end int64
	calls := map[id]int{}
	var ops []Op
	for _, e := range events {
		end = max(end, e.T)
		switch e.Phase {
		case history.Call:
			if e.Op == 0 {
				continue // a harness event
			}
			calls[id{e.Process, e.PID, e.Op}] = len(ops)
			ops = append(ops, Op{Process: e.Process, PID: e.PID, Kind: e.Kind, Key: e.Key, Owner: e.Owner, Token: e.Token, TTL: e.TTL, Call: e.T})
		case history.Return:
			i, ok := calls[id{e.Process, e.PID, e.Op}]
			if !ok {
				continue
			}
			op := &ops[i]
			op.Ret, op.Result, op.Returned, op.HeldToken, op.Attempt = e.T, e.Result, true, e.HeldToken, e.Attempt
			if e.Result == history.OK {
				op.Granted = e.TTL
				if e.Token != 0 {
					op.Token = e.Token
				}
			}
		}
	}
	for i := range ops {
		if !ops[i].Returned {
			ops[i].Ret, ops[i].Result = end+1, history.Indeterminate
		}
	}
	return ops
}

// acrossRestart reports whether a backend restart began between a and b.
func (c *check) acrossRestart(a, b int64) bool {
	for _, r := range c.restarts {
		if r[0] >= a && r[0] <= b || r[1] >= a && r[1] <= b {
			return true
		}
	}
	return false
}

func isOccurrence(key string) bool { return strings.HasPrefix(key, harness.JobName+"@") }

// effects counts what the fenced sink accepted and rejected, duplicates at
// it, and duplicates in the unfenced log.
func (c *check) effects(fenced, unfenced []history.Event) {
	accepted := map[string][]uint64{}
	for _, e := range fenced {
		if e.Kind != history.Effect {
			continue
		}
		if e.Result == history.Accepted {
			c.r.FencedAccepted++
			if isOccurrence(e.Key) {
				accepted[e.Key] = append(accepted[e.Key], e.Token)
			}
		} else {
			c.r.FencedRejected++
			if !isOccurrence(e.Key) {
				c.r.RejectedLocks++
			}
		}
	}
	finishedOK := map[string]bool{} // key#token whose Finish answered OK
	for _, op := range c.ops {
		if op.Kind == history.Finish && op.Result == history.OK {
			finishedOK[op.Key+"#"+strconv.FormatUint(op.Token, 10)] = true
		}
	}
	var keys []string
	for k, toks := range accepted {
		if len(toks) > 1 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		toks := accepted[k]
		d := Dup{Key: k, Tokens: toks, Explained: true}
		for i, t := range toks[:len(toks)-1] {
			if toks[i+1] == t || finishedOK[k+"#"+strconv.FormatUint(t, 10)] {
				d.Explained = false
			}
		}
		c.r.FencedDuplicates = append(c.r.FencedDuplicates, d)
	}
	unf := map[string]int{}
	for _, e := range unfenced {
		if e.Kind == history.Effect && isOccurrence(e.Key) {
			unf[e.Key]++
		}
	}
	for k, n := range unf {
		if n > 1 {
			c.r.UnfencedDuplicates++
			if len(accepted[k]) == 1 {
				c.r.CaughtByFencing++
			}
		}
	}
}

// missed lists the occurrences inside the workload window (less the time a
// run takes to finish) whose effect never reached the fenced sink.
func (c *check) missed(fenced []history.Event) {
	done := map[string]bool{}
	for _, e := range fenced {
		if e.Result == history.Accepted {
			done[e.Key] = true
		}
	}
	every := c.run.JobEvery.Milliseconds()
	if every <= 0 {
		return
	}
	from := (c.run.WindowWall[0]/every + 1) * every
	to := c.run.WindowWall[1] - c.run.JobWork.Milliseconds() - c.run.TTL.Milliseconds() - 500
	var runStart int64
	for at := from; at <= to; at += every {
		c.r.Expected++
		key := harness.JobName + "@" + strconv.FormatInt(at, 10)
		if done[key] {
			c.r.Ran++
			continue
		}
		c.r.Missed = append(c.r.Missed, key)
		if done[harness.JobName+"@"+strconv.FormatInt(at-every, 10)] || at == from {
			runStart = at
		}
		c.r.LongestMiss = max(c.r.LongestMiss, time.Duration(at-runStart+every)*time.Millisecond)
		mono := c.run.WindowMono[0] + (at-c.run.WindowWall[0])*int64(time.Millisecond)
		for _, f := range c.run.Applied {
			if mono >= f.From-int64(c.run.TTL) && mono <= f.To+2*int64(c.run.TTL) {
				c.r.MissedInFault++
				break
			}
		}
	}
}

// grants are the successful acquires, claims and reclaims. A grant's Call
// is that of the first attempt of its request: retries reuse the owner
// nonce, and a retry of an attempt that was applied answers with that
// attempt's grant ("yours"), made when the first attempt was sent.
func (c *check) grants() map[string][]Op {
	by := map[string][]Op{}
	for _, op := range c.firstAttempts() {
		if op.Result != history.OK {
			continue
		}
		switch op.Kind {
		case history.Acquire:
			by[op.Key] = append(by[op.Key], op)
		case history.Claim, history.Reclaim:
			job, _, _ := strings.Cut(op.Key, "@")
			by["job "+job] = append(by["job "+job], op)
		}
	}
	return by
}

// firstAttempts returns the operations with the Call of each acquire,
// claim and reclaim set to that of the first attempt of its request (same
// kind, key and owner nonce).
func (c *check) firstAttempts() []Op {
	first := map[string]int64{}
	for _, op := range c.ops {
		switch op.Kind {
		case history.Acquire, history.Claim, history.Reclaim:
			k := op.Kind + " " + op.Key + " " + op.Owner
			if f, ok := first[k]; !ok || op.Call < f {
				first[k] = op.Call
			}
		}
	}
	out := slices.Clone(c.ops)
	for i, op := range out {
		if f, ok := first[op.Kind+" "+op.Key+" "+op.Owner]; ok {
			out[i].Call = f
		}
	}
	return out
}

// regressions: a grant requested after another grant (by another owner)
// had returned must carry a greater token.
func (c *check) regressions() {
	for scope, gs := range c.grants() {
		sort.Slice(gs, func(i, j int) bool { return gs[i].Ret < gs[j].Ret })
		for j, b := range gs {
			// The greatest token among grants that returned before b was sent.
			var best *Op
			for i := 0; i < j && gs[i].Ret < b.Call; i++ {
				if gs[i].Owner != b.Owner && (best == nil || gs[i].Token > best.Token) {
					best = &gs[i]
				}
			}
			if best != nil && b.Token <= best.Token {
				c.r.Regressions = append(c.r.Regressions, Regression{Scope: scope, Earlier: best.Token, Later: b.Token,
					At: b.Ret, AcrossRestart: c.acrossRestart(best.Call, b.Ret)})
			}
		}
	}
	sort.Slice(c.r.Regressions, func(i, j int) bool { return c.r.Regressions[i].At < c.r.Regressions[j].At })
}

// overlaps: a grant that returned before another owner's lease could have
// expired, that owner having neither released nor been told it lost it.
func (c *check) overlaps() {
	slack := slackFor(c.run.TTL)
	byKey := map[string][]Op{}
	for _, op := range c.firstAttempts() {
		switch op.Kind {
		case history.Acquire, history.Renew, history.Release:
			byKey[op.Key] = append(byKey[op.Key], op)
		}
	}
	for key, ops := range byKey {
		for _, b := range ops {
			if b.Kind != history.Acquire || b.Result != history.OK {
				continue
			}
			live := map[string]int64{} // owner → lease provably live until
			ended := map[string]bool{}
			for _, a := range ops {
				if a.Owner == b.Owner || a.Call >= b.Ret {
					continue
				}
				switch {
				case a.Kind == history.Release || a.Result == history.Lost || a.Result == history.Indeterminate:
					ended[a.Owner] = true
				case a.Result == history.OK && a.Ret < b.Call && (a.Kind == history.Acquire || a.Kind == history.Renew):
					live[a.Owner] = max(live[a.Owner], a.Call+a.Granted)
				}
			}
			for owner, until := range live {
				if !ended[owner] && b.Ret+slack < until {
					c.r.Overlaps = append(c.r.Overlaps, Overlap{Key: key, Holder: owner, Grantee: b.Owner,
						LiveFor: until - b.Ret, At: b.Ret, AcrossRestart: c.acrossRestart(b.Ret-int64(c.run.TTL)*4, b.Ret)})
				}
			}
		}
	}
	sort.Slice(c.r.Overlaps, func(i, j int) bool { return c.r.Overlaps[i].At < c.r.Overlaps[j].At })
}

func (c *check) verdict() {
	r, caps := c.r, c.run.Capabilities
	restarted := len(c.restarts) > 0
	// A restart of a backend without durable fencing may lose the counter
	// and the leases: predicted.
	predictedRestart := restarted && !caps.DurableFencing
	fail := func(f string, a ...any) { r.Failures = append(r.Failures, fmt.Sprintf(f, a...)) }
	pred := func(f string, a ...any) { r.Predicted = append(r.Predicted, fmt.Sprintf(f, a...)) }

	var unexplained int
	for _, d := range r.FencedDuplicates {
		if !d.Explained {
			unexplained++
		}
	}
	if unexplained > 0 {
		if caps.SafeFencing && !predictedRestart {
			fail("%d occurrences took effect more than once at the fenced sink without a lost lease to explain it", unexplained)
		} else {
			pred("%d occurrences took effect more than once at the fenced sink (backend declares SafeFencing=%v DurableFencing=%v)", unexplained, caps.SafeFencing, caps.DurableFencing)
		}
	}
	var regr, regrRestart int
	for _, g := range r.Regressions {
		if g.AcrossRestart && predictedRestart {
			regrRestart++
		} else {
			regr++
		}
	}
	if regr > 0 {
		if caps.SafeFencing {
			fail("%d token regressions", regr)
		} else {
			pred("%d token regressions (backend declares SafeFencing=false)", regr)
		}
	}
	if regrRestart > 0 {
		pred("%d token regressions across a restart of a backend that declares DurableFencing=false", regrRestart)
	}
	var ov, ovRestart int
	for _, o := range r.Overlaps {
		if o.AcrossRestart && predictedRestart {
			ovRestart++
		} else {
			ov++
		}
	}
	if ov > 0 {
		if caps.SafeFencing {
			fail("%d overlapping lease grants", ov)
		} else {
			pred("%d overlapping lease grants (backend declares SafeFencing=false)", ov)
		}
	}
	if ovRestart > 0 {
		pred("%d overlapping lease grants across a restart of a backend that declares DurableFencing=false", ovRestart)
	}
	c.execVerdict(fail, pred)
	if r.Linearizable == string(porcupine.Illegal) {
		switch {
		case r.HeldAnswersOnly:
			r.Warnings = append(r.Warnings, "some Held answers are not linearizable (a *HeldError naming a non-holder, or \"held\" while the key was free); with Held answers taken as not applied, every grant, token, renewal and release is linearizable")
		case caps.SafeFencing:
			fail("lease history not linearizable against the expiry-aware lease model")
		default:
			pred("lease history not linearizable against the expiry-aware lease model (backend declares SafeFencing=false)")
		}
	}
	r.Pass = len(r.Failures) == 0
}
