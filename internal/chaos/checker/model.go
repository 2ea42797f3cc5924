package checker

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/internal/chaos/history"
)

// LeaseInput is a lease operation as the model sees it: what was asked, and
// when (CLOCK_MONOTONIC ns) it was sent and answered.
type LeaseInput struct {
	Kind  string // history.Acquire, Renew, Release
	Key   string
	Owner string
	Token uint64 // renew, release: the caller's token
	TTL   int64  // requested
	Call  int64
	Ret   int64 // the end of the history for an operation that never returned
}

// LeaseOutput is its answer.
type LeaseOutput struct {
	Result    string // history.OK, Held, Lost, Refused, Indeterminate
	Token     uint64 // acquire OK: the grant's token
	TTL       int64  // OK: the granted TTL
	HeldToken uint64 // Held: the holder's token
}

// leaseState is one key's state: its holder (if the lease may still be
// live), the holder's token, the earliest instant its lease can expire, and
// the greatest token granted so far.
type leaseState struct {
	Holder  string
	Token   uint64
	Unknown bool  // the holder's grant was indeterminate: its token is not known
	ExpLo   int64 // the lease cannot expire before this (CLOCK_MONOTONIC ns)
	Max     uint64
}

// leaseModel is the sequential specification of one key's lease, knowing
// expiry. A lease granted or renewed by an operation sent at c with TTL d
// cannot expire before c + d − slack (the server applied it no earlier than
// c), and may expire any time after that (a server may keep it longer: a
// lazy expiry, a session, a lease extended by a leader change). So:
//
//   - Acquire by another owner succeeds only if the key is free or its lease
//     could have expired by the time the acquire returned, and only with a
//     token greater than every token granted before.
//   - Acquire answers Held only while the key has a holder, with its token.
//   - Renew and Release succeed only for the holder's owner and token; they
//     answer Lost only if the caller is not the holder or its lease could
//     have expired (and then the holder is gone).
//   - An indeterminate operation may or may not have been applied; both
//     successor states are kept (a nondeterministic model).
//
// A plain mutex model (no expiry) fails every hand-over after an expiry;
// this one fails a grant while a lease is provably live, a token that does
// not increase, and a renewal that succeeds for someone who is not the
// holder.
func leaseModel(slack int64) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range h {
				k := op.Input.(LeaseInput).Key
				if _, ok := by[k]; !ok {
					keys = append(keys, k)
				}
				by[k] = append(by[k], op)
			}
			var out [][]porcupine.Operation
			for _, k := range keys {
				out = append(out, by[k])
			}
			return out
		},
		Init: func() []interface{} { return []interface{}{leaseState{}} },
		Step: func(st, in, out interface{}) []interface{} {
			return leaseStep(st.(leaseState), in.(LeaseInput), out.(LeaseOutput), slack)
		},
		DescribeOperation: func(in, out interface{}) string {
			i, o := in.(LeaseInput), out.(LeaseOutput)
			s := fmt.Sprintf("%s %s", i.Kind, shortOwner(i.Owner))
			if i.Token != 0 {
				s += fmt.Sprintf(" t%d", i.Token)
			}
			s += " → " + o.Result
			switch {
			case o.Result == history.OK && i.Kind == history.Acquire:
				s += fmt.Sprintf(" t%d", o.Token)
			case o.Result == history.Held:
				s += fmt.Sprintf(" (t%d)", o.HeldToken)
			}
			return s
		},
		DescribeState: func(st interface{}) string {
			s := st.(leaseState)
			if s.Holder == "" {
				return fmt.Sprintf("free, max t%d", s.Max)
			}
			tok := fmt.Sprintf("t%d", s.Token)
			if s.Unknown {
				tok = "t?"
			}
			return fmt.Sprintf("%s %s, max t%d", shortOwner(s.Holder), tok, s.Max)
		},
	}
	return nm.ToModel()
}

func shortOwner(o string) string {
	// instance/nonce: keep the instance and 6 hex digits of the nonce.
	for i := 0; i < len(o); i++ {
		if o[i] == '/' && len(o) > i+7 {
			return o[:i+7]
		}
	}
	return o
}

func leaseStep(s leaseState, in LeaseInput, out LeaseOutput, slack int64) []interface{} {
	mayHaveExpired := in.Ret+slack >= s.ExpLo
	isHolder := s.Holder != "" && s.Holder == in.Owner && (s.Unknown || in.Kind == history.Acquire || s.Token == in.Token)
	switch in.Kind {
	case history.Acquire:
		granted := func(tok uint64, ttl int64, unknown bool) leaseState {
			return leaseState{Holder: in.Owner, Token: tok, Unknown: unknown, ExpLo: in.Call + ttl, Max: max(s.Max, tok)}
		}
		switch out.Result {
		case history.OK:
			if s.Holder == in.Owner && (s.Unknown || out.Token == s.Token) {
				// A retry answering "yours": the existing grant.
				n := s
				n.Token, n.Unknown, n.Max = out.Token, false, max(s.Max, out.Token)
				return []interface{}{n}
			}
			if s.Holder != "" && !mayHaveExpired {
				return nil // granted while another lease was provably live
			}
			if out.Token <= s.Max {
				return nil // the token did not increase
			}
			return []interface{}{granted(out.Token, out.TTL, false)}
		case history.Held:
			if s.Holder == "" || s.Holder == in.Owner {
				return nil
			}
			if !s.Unknown && out.HeldToken != 0 && out.HeldToken != s.Token { // 0: the backend did not say
				return nil
			}
			n := s
			if s.Unknown && out.HeldToken != 0 {
				n.Token, n.Unknown, n.Max = out.HeldToken, false, max(s.Max, out.HeldToken)
			}
			return []interface{}{n}
		case history.Indeterminate:
			res := []interface{}{s}
			if s.Holder == "" || mayHaveExpired {
				res = append(res, granted(0, in.TTL, true))
			}
			return res
		default: // refused: not applied
			return []interface{}{s}
		}
	case history.Renew:
		switch out.Result {
		case history.OK:
			if !isHolder {
				return nil
			}
			n := s
			n.Token, n.Unknown = in.Token, false
			n.ExpLo = max(s.ExpLo, in.Call+out.TTL)
			return []interface{}{n}
		case history.Lost:
			if !isHolder {
				return []interface{}{s}
			}
			if !mayHaveExpired {
				return nil // lost while provably live
			}
			return []interface{}{leaseState{Max: s.Max}}
		case history.Indeterminate:
			res := []interface{}{s}
			if isHolder {
				n := s
				n.ExpLo = max(s.ExpLo, in.Call+in.TTL)
				res = append(res, n)
				if mayHaveExpired {
					res = append(res, leaseState{Max: s.Max})
				}
			}
			return res
		default:
			return []interface{}{s}
		}
	case history.Release:
		switch out.Result {
		case history.OK:
			if !isHolder {
				return nil
			}
			return []interface{}{leaseState{Max: s.Max}}
		case history.Lost:
			if !isHolder {
				return []interface{}{s}
			}
			if !mayHaveExpired {
				return nil
			}
			return []interface{}{leaseState{Max: s.Max}}
		case history.Indeterminate:
			res := []interface{}{s}
			if isHolder {
				res = append(res, leaseState{Max: s.Max})
			}
			return res
		default:
			return []interface{}{s}
		}
	}
	return nil
}

// slackFor is the model's allowance for the rates of the server's and the
// host's clocks: 1 % of the TTL plus 20 ms.
func slackFor(ttl time.Duration) int64 { return int64(ttl)/100 + int64(20*time.Millisecond) }

func (c *check) leaseOps() []porcupine.Operation {
	clients := map[string]int{}
	var out []porcupine.Operation
	for _, op := range c.ops {
		switch op.Kind {
		case history.Acquire, history.Renew, history.Release:
		default:
			continue
		}
		cl := op.Process + "/" + strconv.Itoa(op.PID)
		if _, ok := clients[cl]; !ok {
			clients[cl] = len(clients)
		}
		res := op.Result
		if res == history.Claimed {
			res = history.Refused
		}
		in := LeaseInput{Kind: op.Kind, Key: op.Key, Owner: op.Owner, Token: op.Token, TTL: op.TTL, Call: op.Call, Ret: op.Ret}
		if op.Kind == history.Acquire {
			in.Token = 0
		}
		out = append(out, porcupine.Operation{ClientId: clients[cl], Input: in, Call: op.Call, Return: op.Ret,
			Output: LeaseOutput{Result: res, Token: op.Token, TTL: op.Granted, HeldToken: op.HeldToken}, Metadata: cl})
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
			if out := op.Output.(LeaseOutput); out.Result == history.Held {
				out.Result, out.HeldToken = history.Refused, 0
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
	model := leaseModel(slackFor(c.run.TTL))
	if c.run.Capabilities.DurableFencing || len(c.restarts) == 0 {
		return porcupine.CheckOperationsVerbose(model, ops, timeout)
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
				out := op.Output.(LeaseOutput)
				out.Result = history.Indeterminate
				op.Output = out
				straddling[i] = true
			}
			span = append(span, op)
		}
		res, info := porcupine.CheckOperationsVerbose(model, span, timeout)
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
