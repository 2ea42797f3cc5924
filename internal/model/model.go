// Package model is the reference model of the backend contract
// (docs/semantics.md) for porcupine: the memory backend's semantics written
// as sequential specifications of one lease key (Leases) and of one job's
// run ledger (Ledger), aware of expiry and of operations whose outcome is
// unknown. The chaos checker (internal/chaos/checker) and the randomized
// conformance check (backend/conformance) both judge their histories
// against it.
//
// Time is what the client saw: every operation carries the instants it was
// sent (Call) and answered (Ret) on one monotonic timeline. The backend
// applied it somewhere in between, judging expiry by its own clock, so a
// lease or claim granted or extended by an operation sent at c with TTL d
// cannot expire before c + d − slack; after that it may expire at any
// moment (a backend may keep a lease longer: a lazy expiry, a session, a
// lease extended by a leader change). The model therefore asserts only
// what a correct backend can never do: grant, or answer "lost", while a
// lease is provably live; grant a token that is not greater than every
// token granted before (unless told the backend does not promise it); let
// two owners win one occurrence; let a caller that is not the holder renew,
// release, heartbeat or finish. An operation whose outcome is unknown
// (Indeterminate) may or may not have taken effect at any point of its
// interval: both successor states are kept.
package model

import "time"

// Operation kinds. Their values are those of the chaos history's kinds.
const (
	Acquire   = "acquire"
	Renew     = "renew"
	Release   = "release"
	Get       = "get"
	Claim     = "claim"
	Reclaim   = "reclaim"
	Heartbeat = "heartbeat"
	Finish    = "finish"
	Abandon   = "abandon"
	Prune     = "prune"
)

// Results of an operation. Their values are those of the chaos history's
// results where it has them.
const (
	OK            = "ok"
	Held          = "held"          // acquire: *HeldError
	Lost          = "lost"          // renew, release, heartbeat, finish: ErrLeaseLost
	Claimed       = "claimed"       // claim, reclaim, abandon: *ClaimedError
	NotFound      = "notfound"      // get, reclaim, abandon: ErrNotFound
	NotExpired    = "notexpired"    // reclaim, abandon: ErrNotExpired
	Overlap       = "overlap"       // claim, reclaim: ErrOverlap
	Refused       = "refused"       // an answer that changed nothing (ErrNotApplied, ...)
	Indeterminate = "indeterminate" // the outcome cannot be known
)

// Options shape the models.
type Options struct {
	// Slack is the allowance, for a lease of the given TTL (ns), for the
	// rates of the backend's clock and the client's: a lease granted by an
	// operation sent at c cannot expire before c + TTL − Slack(TTL). Nil:
	// DefaultSlack.
	Slack func(ttl int64) int64
	// UnorderedTokens: the backend does not promise that tokens increase
	// (it declares SafeFencing=false), so the model does not assert it, nor
	// that the token a Held or Get answer names is that of the holder's
	// grant (a quorum backend's nodes may hold a grant's token before it
	// was raised to the quorum's). Every other rule still holds.
	UnorderedTokens bool
}

// DefaultSlack is 1 % of the TTL plus 20 ms.
func DefaultSlack(ttl int64) int64 { return ttl/100 + int64(20*time.Millisecond) }

func (o Options) expLo(call, ttl int64) int64 {
	slack := o.Slack
	if slack == nil {
		slack = DefaultSlack
	}
	return call + ttl - slack(ttl)
}

// increases reports whether tok may follow max under o.
func (o Options) increases(tok, max uint64) bool { return o.UnorderedTokens || tok > max }

// shortOwner keeps an "instance/nonce" owner's instance and 6 hex digits.
func shortOwner(o string) string {
	for i := 0; i < len(o); i++ {
		if o[i] == '/' && len(o) > i+7 {
			return o[:i+7]
		}
	}
	return o
}
