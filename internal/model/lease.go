package model

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// LeaseInput is a lease operation as the model sees it: what was asked, and
// when it was sent and answered (ns on one monotonic timeline).
type LeaseInput struct {
	Kind  string // Acquire, Renew, Release, Get
	Key   string
	Owner string // "instance/nonce"; empty for Get
	Token uint64 // renew, release: the caller's token
	TTL   int64  // acquire, renew: requested
	Call  int64
	Ret   int64 // for an operation that never returned: the end of the history
}

// LeaseOutput is its answer.
type LeaseOutput struct {
	Result string // OK, Held, Lost, NotFound, Refused, Indeterminate
	Token  uint64 // acquire OK: the grant's token; get OK: the holder's
	TTL    int64  // acquire, renew OK: the granted TTL
	// HeldToken is the holder's token a Held answer names (0: not said).
	HeldToken uint64
	// Holder is the owner a Get answer (or a Held answer) names ("": not said).
	Holder string
}

// leaseState is one key's state: its holder (if the lease may still be
// live), the holder's token, the earliest instant its lease can expire, and
// the greatest token granted so far.
type leaseState struct {
	Holder  string
	Token   uint64
	Unknown bool  // the holder's grant was indeterminate: its token is not known
	ExpLo   int64 // the lease cannot expire before this
	Max     uint64
}

// Leases returns the model of leases, one key per partition:
//
//   - Acquire by another owner succeeds only if the key is free or its lease
//     could have expired by the time the acquire returned, and only with a
//     token greater than every token granted before; by the holder's own
//     owner nonce (a retry) it answers the holder's token and extends it.
//   - Acquire answers Held only while another owner holds the key.
//   - Renew and Release succeed only for the holder's owner and token; they
//     answer Lost only if the caller is not the holder or its lease could
//     have expired (and then the holder is gone).
//   - Get names the holder and its token, or answers NotFound only if the
//     key is free or its lease could have expired (and then it is free).
//
// A plain mutex model (no expiry) fails every hand-over after an expiry;
// this one fails a grant while a lease is provably live, a token that does
// not increase, and a renewal that succeeds for someone who is not the
// holder.
func Leases(opt Options) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: partitionBy(func(in any) []string { return []string{in.(LeaseInput).Key} }),
		Init:      func() []any { return []any{leaseState{}} },
		Step: func(st, in, out any) []any {
			return leaseStep(st.(leaseState), in.(LeaseInput), out.(LeaseOutput), opt)
		},
		DescribeOperation: func(in, out any) string {
			i, o := in.(LeaseInput), out.(LeaseOutput)
			s := fmt.Sprintf("%s %s", i.Kind, shortOwner(i.Owner))
			if i.Token != 0 {
				s += fmt.Sprintf(" t%d", i.Token)
			}
			s += " → " + o.Result
			switch {
			case o.Result == OK && (i.Kind == Acquire || i.Kind == Get):
				s += fmt.Sprintf(" %s t%d", shortOwner(o.Holder), o.Token)
			case o.Result == Held:
				s += fmt.Sprintf(" (t%d)", o.HeldToken)
			}
			return s
		},
		DescribeState: func(st any) string {
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

// partitionBy splits a history by the partitions each input names, in the
// order they first appear; an input naming several is in each of them.
func partitionBy(parts func(in any) []string) func([]porcupine.Operation) [][]porcupine.Operation {
	return func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range h {
			for _, p := range parts(op.Input) {
				if _, ok := by[p]; !ok {
					order = append(order, p)
				}
				by[p] = append(by[p], op)
			}
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, p := range order {
			out = append(out, by[p])
		}
		return out
	}
}

func leaseStep(s leaseState, in LeaseInput, out LeaseOutput, opt Options) []any {
	if opt.UnorderedTokens && (out.Result == Held || in.Kind == Get) {
		out.HeldToken, out.Token = 0, 0 // the token named is not judged
	}
	mayHaveExpired := in.Ret >= s.ExpLo
	isHolder := s.Holder != "" && s.Holder == in.Owner && (s.Unknown || in.Kind == Acquire || s.Token == in.Token)
	free := leaseState{Max: s.Max}
	switch in.Kind {
	case Acquire:
		granted := func(tok uint64, ttl int64, unknown bool) leaseState {
			return leaseState{Holder: in.Owner, Token: tok, Unknown: unknown, ExpLo: opt.expLo(in.Call, ttl), Max: max(s.Max, tok)}
		}
		switch out.Result {
		case OK:
			if isHolder && (s.Unknown || out.Token == s.Token) {
				// A retry answering "yours": the existing grant, renewed.
				n := s
				n.Token, n.Unknown, n.Max = out.Token, false, max(s.Max, out.Token)
				n.ExpLo = max(s.ExpLo, opt.expLo(in.Call, out.TTL))
				return []any{n}
			}
			if s.Holder != "" && !mayHaveExpired {
				return nil // granted while another lease was provably live
			}
			if !opt.increases(out.Token, s.Max) {
				return nil // the token did not increase
			}
			return []any{granted(out.Token, out.TTL, false)}
		case Held:
			if s.Holder == "" || s.Holder == in.Owner {
				return nil
			}
			if out.Holder != "" && out.Holder != s.Holder {
				return nil
			}
			if !s.Unknown && out.HeldToken != 0 && out.HeldToken != s.Token { // 0: the backend did not say
				return nil
			}
			n := s
			if s.Unknown && out.HeldToken != 0 {
				n.Token, n.Unknown, n.Max = out.HeldToken, false, max(s.Max, out.HeldToken)
			}
			return []any{n}
		case Indeterminate:
			res := []any{s}
			switch {
			case isHolder:
				n := s
				n.ExpLo = max(s.ExpLo, opt.expLo(in.Call, in.TTL))
				res = append(res, n)
				if mayHaveExpired { // expired, then granted afresh
					res = append(res, granted(0, in.TTL, true))
				}
			case s.Holder == "" || mayHaveExpired:
				res = append(res, granted(0, in.TTL, true))
			}
			return res
		default: // refused: not applied
			return []any{s}
		}
	case Renew:
		switch out.Result {
		case OK:
			if !isHolder {
				return nil
			}
			n := s
			n.Token, n.Unknown = in.Token, false
			n.ExpLo = max(s.ExpLo, opt.expLo(in.Call, out.TTL))
			return []any{n}
		case Lost:
			if !isHolder {
				return []any{s}
			}
			if !mayHaveExpired {
				return nil // lost while provably live
			}
			return []any{free}
		case Indeterminate:
			res := []any{s}
			if isHolder {
				n := s
				n.ExpLo = max(s.ExpLo, opt.expLo(in.Call, in.TTL))
				res = append(res, n)
				if mayHaveExpired {
					res = append(res, free)
				}
			}
			return res
		default:
			return []any{s}
		}
	case Release:
		switch out.Result {
		case OK:
			if !isHolder {
				return nil
			}
			return []any{free}
		case Lost:
			if !isHolder {
				return []any{s}
			}
			if !mayHaveExpired {
				return nil
			}
			return []any{free}
		case Indeterminate:
			res := []any{s}
			if isHolder {
				res = append(res, free)
			}
			return res
		default:
			return []any{s}
		}
	case Get:
		switch out.Result {
		case OK:
			if s.Holder == "" || out.Holder != s.Holder || out.Token != 0 && !s.Unknown && out.Token != s.Token {
				return nil
			}
			n := s
			if out.Token != 0 { // 0: not judged
				n.Token, n.Unknown, n.Max = out.Token, false, max(s.Max, out.Token)
			}
			return []any{n}
		case NotFound:
			if s.Holder != "" && !mayHaveExpired {
				return nil // not found while provably live
			}
			return []any{free}
		default: // reads change nothing
			return []any{s}
		}
	}
	return nil
}
