package checker

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/internal/chaos/history"
	"github.com/leasehold/leasehold/internal/model"
)

// leaseModel is the reference lease model (internal/model) with the
// run's slack: one allowance, for the run's TTL, on every lease.
func (c *check) leaseModel() porcupine.Model {
	slack := slackFor(c.run.TTL)
	return model.Leases(model.Options{Slack: func(int64) int64 { return slack }})
}

// modelKind names a history's lease kind in the model's terms; false for
// a kind that is not a lease operation.
func modelKind(kind string) (string, bool) {
	switch kind {
	case history.Acquire:
		return model.Acquire, true
	case history.Renew:
		return model.Renew, true
	case history.Release:
		return model.Release, true
	}
	return "", false
}

// modelResult names a history's result of a lease operation in the
// model's terms. A Claimed answer changed nothing; an answer the model
// does not know is judged as either outcome.
func modelResult(result string) string {
	switch result {
	case history.OK:
		return model.OK
	case history.Held:
		return model.Held
	case history.Lost:
		return model.Lost
	case history.Refused, history.Claimed:
		return model.Refused
	}
	return model.Indeterminate
}

// slackFor is the model's allowance for the rates of the server's and the
// host's clocks: 1 % of the TTL plus 20 ms.
func slackFor(ttl time.Duration) int64 { return int64(ttl)/100 + int64(20*time.Millisecond) }

func (c *check) leaseOps() []porcupine.Operation {
	clients := map[string]int{}
	var out []porcupine.Operation
	for _, op := range c.ops {
		kind, ok := modelKind(op.Kind)
		if !ok {
			continue
		}
		cl := op.Process + "/" + strconv.Itoa(op.PID)
		if _, ok := clients[cl]; !ok {
			clients[cl] = len(clients)
		}
		res := modelResult(op.Result)
		in := model.LeaseInput{Kind: kind, Key: op.Key, Owner: op.Owner, Token: op.Token, TTL: op.TTL, Call: op.Call, Ret: op.Ret}
		if kind == model.Acquire {
			in.Token = 0
		}
		out = append(out, porcupine.Operation{ClientId: clients[cl], Input: in, Call: op.Call, Return: op.Ret,
			Output: model.LeaseOutput{Result: res, Token: op.Token, TTL: op.Granted, HeldToken: op.HeldToken}, Metadata: cl})
	}
	return out
}

// linearizability checks the lease operations with porcupine. For a
// backend that does not declare durable fencing and was restarted, the
// restart is the predicted loss of state: each span between restarts is
// checked on its own from an empty state, so that an anomaly inside a span
// is still a failure. An operation that overlaps a restart (from the
// moment the server was killed until the harness saw it answer again) may
// have been answered by either server, so it is taken as indeterminate in
// the spans on both sides.
//
// If the history is not linearizable but becomes so once Held answers are
// taken as "not applied" (a failed acquire changes nothing, whatever holder
// it names), the backend's only fault is in what its Held answers say —
// a non-holder named as the holder, or "held" while the key was free (a
// spurious failure under contention): reported apart (HeldAnswersOnly),
// since no grant, token, renewal or release was wrong.
func (c *check) linearizability(timeout time.Duration) porcupine.LinearizationInfo {
	ops := c.leaseOps()
	c.r.LeaseOps = len(ops)
	res, info := c.checkLeases(ops, timeout)
	c.r.Linearizable = string(res)
	if res == porcupine.Illegal {
		stripped := slices.Clone(ops)
		for i, op := range stripped {
			if out := op.Output.(model.LeaseOutput); out.Result == model.Held {
				out.Result, out.HeldToken = model.Refused, 0
				stripped[i].Output = out
			}
		}
		if again, _ := c.checkLeases(stripped, timeout); again == porcupine.Ok {
			c.r.HeldAnswersOnly = true
		}
	}
	return info
}

func (c *check) checkLeases(ops []porcupine.Operation, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	lm := c.leaseModel()
	if c.run.Capabilities.DurableFencing || len(c.restarts) == 0 {
		return porcupine.CheckOperationsVerbose(lm, ops, timeout)
	}
	// Span k runs from the end of restart k-1 to the start of restart k.
	windows := append([][2]int64{{math.MinInt64, math.MinInt64}}, c.restarts...)
	windows = append(windows, [2]int64{math.MaxInt64, math.MaxInt64})
	worst := porcupine.Ok
	var shown porcupine.LinearizationInfo
	straddling := map[int]bool{}
	for k := 0; k+1 < len(windows); k++ {
		before, after := windows[k], windows[k+1]
		var span []porcupine.Operation
		for i, op := range ops {
			if op.Return <= before[0] || op.Call >= after[1] {
				continue // wholly before the last restart, or after the next
			}
			if op.Call < before[1] || op.Return > after[0] {
				out := op.Output.(model.LeaseOutput)
				out.Result = model.Indeterminate
				op.Output = out
				straddling[i] = true
			}
			span = append(span, op)
		}
		res, info := porcupine.CheckOperationsVerbose(lm, span, timeout)
		if k == 0 || res != porcupine.Ok && worst != porcupine.Illegal {
			shown = info
		}
		if res == porcupine.Illegal || res == porcupine.Unknown && worst == porcupine.Ok {
			worst = res
		}
	}
	c.r.StraddlingRestart = len(straddling)
	return worst, shown
}
