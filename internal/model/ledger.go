package model

import (
	"fmt"
	"strings"

	"github.com/anishathalye/porcupine"
)

// MaxOccurrences is how many occurrences of one job the ledger model
// tells apart (LedgerInput.Occurrence is 0..MaxOccurrences-1).
const MaxOccurrences = 8

// LedgerInput is a run-ledger operation as the model sees it.
type LedgerInput struct {
	Kind       string // Claim, Reclaim, Heartbeat, Finish, Abandon, Prune
	Job        string // empty for Prune, which acts on every job (see Ledger)
	Occurrence int    // which occurrence of the job, 0..MaxOccurrences-1
	Owner      string // claim, reclaim, heartbeat, finish
	Token      uint64 // heartbeat, finish: the caller's token
	TTL        int64  // claim, reclaim, heartbeat: requested
	MaxRunning int    // claim, reclaim: the job's limit (0: none)
	// Contended marks one occurrence's part of a Prune (see Ledger) while
	// another operation on that occurrence overlaps the Prune: the run may
	// be skipped, as backend.Ledger's Prune allows.
	Contended bool
	Call      int64
	Ret       int64
}

// LedgerOutput is its answer.
type LedgerOutput struct {
	Result string // OK, Claimed, Lost, NotFound, NotExpired, Overlap, Refused, Indeterminate
	Token  uint64 // claim, reclaim OK: the grant's token
	TTL    int64  // claim, reclaim OK: the granted TTL
	// RecordToken is the token of the record a Claimed answer carries (0:
	// not said).
	RecordToken uint64
	Pruned      int // prune OK: how many runs it deleted, of every job
}

// Phases of an occurrence.
const (
	absent   = 0
	running  = 1
	finished = 2 // succeeded, failed or abandoned: never claimed again
)

// occurrence is one occurrence's record as the model knows it.
type occurrence struct {
	Phase   uint8
	Owner   string
	Token   uint64
	Unknown bool  // granted by an indeterminate operation: the token is not known
	ExpLo   int64 // the runner's lease cannot expire before this
}

// jobState is one job's ledger: the greatest token granted for the job and
// its occurrences. An array, so that states compare with ==.
type jobState struct {
	Max uint64
	Occ [MaxOccurrences]occurrence
}

// Ledger returns the model of the run ledger, one job per partition (a
// Prune is in every job's partition, as one operation per occurrence). It
// is the memory backend's semantics:
//
//   - The first claim of an occurrence wins, with a token greater than
//     every token granted before for the job; a retry by the winner's owner
//     nonce answers the same token while the occurrence runs (or Lost, as
//     Heartbeat would, once its lease could have expired); every other
//     claim is Claimed, whatever the state, until Prune deletes the record.
//   - A claim or reclaim is refused with Overlap only while MaxRunning other
//     occurrences may be running, and granted only while fewer are
//     provably live.
//   - Heartbeat and Finish succeed only for the runner's owner and token,
//     and answer Lost only to someone else or once the lease could have
//     expired.
//   - Reclaim and Abandon take over, or end, a running occurrence only once
//     its lease could have expired; NotExpired while it runs, Claimed once
//     finished, NotFound if never claimed.
//   - Prune deletes finished runs only, each at some moment while it runs.
//     The model assumes each Prune's olderThan is later than every finish
//     and its batch larger than the number of finished runs, so that it
//     deletes every run finished when it starts — except a run another
//     operation on its occurrence touches while the Prune runs, which it
//     may skip (backend.Ledger allows it: PostgreSQL's SKIP LOCKED does).
func Ledger(opt Options) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: ledgerPartition,
		Init:      func() []any { return []any{jobState{}} },
		Step: func(st, in, out any) []any {
			return ledgerStep(st.(jobState), in.(LedgerInput), out.(LedgerOutput), opt)
		},
		DescribeOperation: func(in, out any) string {
			i, o := in.(LedgerInput), out.(LedgerOutput)
			if i.Kind == Prune {
				return fmt.Sprintf("prune → %s %d", o.Result, o.Pruned)
			}
			s := fmt.Sprintf("%s #%d %s", i.Kind, i.Occurrence, shortOwner(i.Owner))
			if i.Token != 0 {
				s += fmt.Sprintf(" t%d", i.Token)
			}
			s += " → " + o.Result
			if o.Result == OK && o.Token != 0 {
				s += fmt.Sprintf(" t%d", o.Token)
			}
			return s
		},
		DescribeState: func(st any) string {
			s := st.(jobState)
			var b strings.Builder
			fmt.Fprintf(&b, "max t%d", s.Max)
			for i, o := range s.Occ {
				if o.Phase == absent {
					continue
				}
				tok := fmt.Sprintf("t%d", o.Token)
				if o.Unknown {
					tok = "t?"
				}
				ph := "running"
				if o.Phase == finished {
					ph = "finished"
				}
				fmt.Fprintf(&b, "; #%d %s %s %s", i, ph, shortOwner(o.Owner), tok)
			}
			return b.String()
		},
	}
	return nm.ToModel()
}

func ledgerPartition(h []porcupine.Operation) [][]porcupine.Operation {
	var jobs []string
	by := map[string][]porcupine.Operation{}
	occs := map[string][]int{}
	type jobOcc struct {
		job string
		occ int
	}
	named := map[jobOcc]bool{}
	for _, op := range h {
		in := op.Input.(LedgerInput)
		if in.Job == "" {
			continue
		}
		if _, ok := by[in.Job]; !ok {
			jobs = append(jobs, in.Job)
			by[in.Job] = nil
		}
		if k := (jobOcc{in.Job, in.Occurrence}); !named[k] {
			named[k] = true
			occs[in.Job] = append(occs[in.Job], in.Occurrence)
		}
	}
	for _, op := range h {
		in := op.Input.(LedgerInput)
		if in.Kind != Prune {
			by[in.Job] = append(by[in.Job], op)
			continue
		}
		// A Prune deletes each run at its own moment (a backend may
		// delete them one by one): one operation per occurrence of each
		// job that the history names, each linearized on its own within
		// the Prune's interval.
		for _, j := range jobs {
			for _, i := range occs[j] {
				piece := op
				in.Job, in.Occurrence = j, i
				in.Contended = touchedDuring(h, j, i, op)
				piece.Input = in
				by[j] = append(by[j], piece)
			}
		}
	}
	out := make([][]porcupine.Operation, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, by[j])
	}
	return out
}

// touchedDuring reports whether an operation on the job's occurrence occ
// overlaps prune in time.
func touchedDuring(h []porcupine.Operation, job string, occ int, prune porcupine.Operation) bool {
	for _, op := range h {
		in := op.Input.(LedgerInput)
		if in.Kind != Prune && in.Job == job && in.Occurrence == occ &&
			op.Call <= prune.Return && prune.Call <= op.Return {
			return true
		}
	}
	return false
}

// runningOthers counts the job's running occurrences other than skip: those
// that may be live (any running one: a lease is never provably expired) and
// those provably live until ret.
func (s *jobState) runningOthers(skip int, ret int64) (maybe, surely int) {
	for i, o := range s.Occ {
		if i == skip || o.Phase != running {
			continue
		}
		maybe++
		if ret < o.ExpLo {
			surely++
		}
	}
	return maybe, surely
}

func ledgerStep(s jobState, in LedgerInput, out LedgerOutput, opt Options) []any {
	if in.Kind == Prune {
		return pruneStep(s, in, out)
	}
	if in.Occurrence < 0 || in.Occurrence >= MaxOccurrences {
		return nil
	}
	o := s.Occ[in.Occurrence]
	mayHaveExpired := in.Ret >= o.ExpLo
	maybe, surely := s.runningOthers(in.Occurrence, in.Ret)
	mayOverlap := in.MaxRunning > 0 && maybe >= in.MaxRunning
	mayRun := in.MaxRunning <= 0 || surely < in.MaxRunning
	with := func(n occurrence) jobState {
		c := s
		c.Occ[in.Occurrence] = n
		c.Max = max(c.Max, n.Token)
		return c
	}
	granted := func(tok uint64, ttl int64, unknown bool) jobState {
		return with(occurrence{Phase: running, Owner: in.Owner, Token: tok, Unknown: unknown, ExpLo: opt.expLo(in.Call, ttl)})
	}
	// yours: the occurrence runs under the caller's owner nonce (a retry).
	yours := o.Phase == running && o.Owner == in.Owner
	renewed := func(tok uint64, ttl int64) jobState {
		n := o
		if tok != 0 {
			n.Token, n.Unknown = tok, false
		}
		n.ExpLo = max(o.ExpLo, opt.expLo(in.Call, ttl))
		return with(n)
	}
	// retryLost judges a retry answered Lost: as Heartbeat would, once the
	// runner's lease could have expired (the record is unchanged).
	retryLost := func() []any {
		if !yours || !mayHaveExpired {
			return nil
		}
		return []any{s}
	}
	holder := o.Phase == running && o.Owner == in.Owner && (o.Unknown || o.Token == in.Token)
	// claimed checks the record a Claimed answer carries, learning its token.
	claimed := func() []any {
		if out.RecordToken == 0 || o.Unknown {
			n := o
			if out.RecordToken != 0 {
				n.Token, n.Unknown = out.RecordToken, false
			}
			return []any{with(n)}
		}
		if out.RecordToken != o.Token {
			return nil
		}
		return []any{s}
	}
	switch in.Kind {
	case Claim:
		switch out.Result {
		case OK:
			if o.Phase != absent {
				if yours && (o.Unknown || out.Token == o.Token) {
					return []any{renewed(out.Token, out.TTL)}
				}
				return nil // an occurrence won twice
			}
			if !mayRun || !opt.increases(out.Token, s.Max) {
				return nil
			}
			return []any{granted(out.Token, out.TTL, false)}
		case Claimed:
			if o.Phase == absent || yours {
				return nil
			}
			return claimed()
		case Overlap:
			if o.Phase != absent || !mayOverlap {
				return nil
			}
			return []any{s}
		case Lost:
			return retryLost()
		case Indeterminate:
			res := []any{s}
			switch {
			case yours:
				res = append(res, renewed(0, in.TTL))
			case o.Phase == absent && mayRun:
				res = append(res, granted(0, in.TTL, true))
			}
			return res
		case Refused:
			return []any{s}
		}
	case Reclaim:
		switch out.Result {
		case OK:
			if yours && (o.Unknown || out.Token == o.Token) {
				return []any{renewed(out.Token, out.TTL)}
			}
			if o.Phase != running || !mayHaveExpired || !mayRun || !opt.increases(out.Token, s.Max) {
				return nil
			}
			return []any{granted(out.Token, out.TTL, false)}
		case NotFound:
			if o.Phase != absent {
				return nil
			}
			return []any{s}
		case Claimed:
			if o.Phase != finished {
				return nil
			}
			return claimed()
		case NotExpired:
			if o.Phase != running || yours {
				return nil
			}
			return []any{s}
		case Overlap:
			if o.Phase != running || yours || !mayHaveExpired || !mayOverlap {
				return nil
			}
			return []any{s}
		case Lost:
			return retryLost()
		case Indeterminate:
			res := []any{s}
			switch {
			case yours:
				res = append(res, renewed(0, in.TTL))
			case o.Phase == running && mayHaveExpired && mayRun:
				res = append(res, granted(0, in.TTL, true))
			}
			return res
		case Refused:
			return []any{s}
		}
	case Heartbeat, Finish:
		done := func() jobState {
			n := o
			n.Token, n.Unknown = in.Token, false
			if in.Kind == Finish {
				n.Phase = finished
			} else {
				n.ExpLo = max(o.ExpLo, opt.expLo(in.Call, in.TTL))
			}
			return with(n)
		}
		switch out.Result {
		case OK:
			if !holder {
				return nil
			}
			return []any{done()}
		case Lost:
			if holder && !mayHaveExpired {
				return nil // lost while provably live
			}
			return []any{s}
		case Indeterminate:
			if holder {
				return []any{s, done()}
			}
			return []any{s}
		case Refused:
			return []any{s}
		}
	case Abandon:
		ended := func() jobState { n := o; n.Phase = finished; return with(n) }
		switch out.Result {
		case OK:
			if o.Phase != running || !mayHaveExpired {
				return nil
			}
			return []any{ended()}
		case NotFound:
			if o.Phase != absent {
				return nil
			}
			return []any{s}
		case Claimed:
			if o.Phase != finished {
				return nil
			}
			return claimed()
		case NotExpired:
			if o.Phase != running {
				return nil
			}
			return []any{s}
		case Indeterminate:
			if o.Phase == running && mayHaveExpired {
				return []any{s, ended()}
			}
			return []any{s}
		case Refused:
			return []any{s}
		}
	}
	return nil
}

// pruneStep is one occurrence's part of a Prune (see ledgerPartition): a
// finished run is deleted, unless another operation on it overlapped the
// Prune (Contended), which may make the backend skip it. A Prune that
// deleted nothing found no finished run it could take; how many others it
// deleted, of other jobs, is not this partition's.
func pruneStep(s jobState, in LedgerInput, out LedgerOutput) []any {
	if in.Occurrence < 0 || in.Occurrence >= MaxOccurrences {
		return nil
	}
	done := s.Occ[in.Occurrence].Phase == finished
	pruned := s
	pruned.Occ[in.Occurrence] = occurrence{}
	switch out.Result {
	case OK:
		if !done {
			return []any{s}
		}
		if in.Contended {
			if out.Pruned == 0 {
				return []any{s}
			}
			return []any{s, pruned}
		}
		if out.Pruned == 0 {
			return nil // a finished run it should have deleted
		}
		return []any{pruned}
	case Indeterminate:
		if done {
			return []any{s, pruned}
		}
		return []any{s}
	case Refused:
		return []any{s}
	}
	return nil
}
