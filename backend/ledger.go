package backend

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// RunState is the state of one occurrence in the run ledger.
type RunState string

// Run states. Running is the only state that holds a lease.
const (
	Running   RunState = "running"
	Succeeded RunState = "succeeded"
	Failed    RunState = "failed"
	Abandoned RunState = "abandoned" // its runner died and the crash policy was skip
)

// Finished reports whether s is terminal.
func (s RunState) Finished() bool { return s == Succeeded || s == Failed || s == Abandoned }

// ClaimRequest asks for the claim of one occurrence: job name + scheduled
// instant. ScheduledAt is normalised to UTC milliseconds by the backend (see
// Instant); two requests whose instants differ by less than a millisecond
// name the same occurrence.
type ClaimRequest struct {
	Job         string
	ScheduledAt time.Time
	// SpecVersion is the hash of the job's schedule spec that computed
	// ScheduledAt. It is stored with the claim and as the job's current
	// version.
	SpecVersion string
	Owner       Owner
	// TTL of the runner's lease on the occurrence; Heartbeat extends it.
	TTL time.Duration
	// MaxEarly: the claim is refused with ErrOccurrenceTooEarly when ScheduledAt is
	// later than the backend's clock plus MaxEarly. Zero allows no earliness.
	MaxEarly time.Duration
	// MaxLate > 0: the claim is refused with ErrOccurrenceTooLate when ScheduledAt is
	// earlier than the backend's clock minus MaxLate (an occurrence that
	// late is a misfire, handled by the job's misfire policy, never claimed
	// by a process that woke late). Zero: no bound. It is judged by the
	// same clock as MaxEarly, in the order: the occurrence's record,
	// MaxEarly, MaxLate, MaxRunning. So a retry by the same owner nonce of
	// an applied claim still answers "yours", a claim of an occurrence
	// claimed before still fails with a *ClaimedError, and a late claim is
	// ErrOccurrenceTooLate even while the job is at MaxRunning. Reclaim ignores
	// MaxLate: a reclaimed occurrence was claimed in time.
	MaxLate time.Duration
	// MaxRunning > 0 refuses the claim with ErrOccurrenceOverlap while that many
	// occurrences of the job are running under unexpired leases
	// (cluster-wide no-overlap is MaxRunning = 1). Reclaim honours it too,
	// counting the job's other occurrences (the one being reclaimed, whose
	// lease expired, does not count itself).
	MaxRunning int
	// MaxAttempts > 0 bounds the attempts of the occurrence: Reclaim
	// refuses with ErrOccurrenceExhausted (nothing changed) an occurrence whose
	// record already has MaxAttempts attempts, judged in the same atomic
	// step as the take-over — not from a listing read earlier, which may
	// be stale. It is judged after the record's state (a retry by the same
	// owner nonce still answers "yours", a finished occurrence still a
	// *ClaimedError, a live lease still ErrLeaseNotExpired) and before
	// MaxRunning. Zero: no bound. Claim ignores it (a claim is attempt 1).
	MaxAttempts int
}

// Run is one occurrence's record in the ledger.
type Run struct {
	Job         string
	ScheduledAt time.Time // UTC, millisecond precision
	SpecVersion string
	Owner       Owner // the current (or last) runner
	Token       uint64
	Attempt     int // 1 for the first claim, +1 per Reclaim
	State       RunState
	ClaimedAt   time.Time // wall clock of the backend at the latest claim
	FinishedAt  time.Time // zero while running
	Duration    time.Duration
	Result      string
	Error       string
	// Expired reports, for a Running occurrence, that its runner's lease has
	// expired by the backend's clock (it may be reclaimed or abandoned).
	Expired bool
}

// ClaimedError is returned by Claim when the occurrence was claimed before
// by someone else; Run is the current record.
type ClaimedError struct{ Run Run }

// Error names the occurrence, its holder and its state.
func (e *ClaimedError) Error() string {
	return fmt.Sprintf("occurrence %s@%s already claimed by %s (state %s, token %d)",
		e.Run.Job, e.Run.ScheduledAt.Format(time.RFC3339Nano), e.Run.Owner.Instance, e.Run.State, e.Run.Token)
}

// Unwrap makes errors.Is(err, ErrOccurrenceClaimed) true.
func (e *ClaimedError) Unwrap() error { return ErrOccurrenceClaimed }

// HeartbeatRequest asks Heartbeat to extend the lease of the runner
// Owner+Token on one occurrence (Job + ScheduledAt, normalised by Instant)
// to TTL from now. CheckHeartbeat validates it.
type HeartbeatRequest struct {
	Job         string
	ScheduledAt time.Time
	Owner       Owner
	Token       uint64
	TTL         time.Duration
}

// FinishRequest asks Finish to record Outcome for one occurrence (Job +
// ScheduledAt, normalised by Instant) held by Owner+Token. CheckFinish
// validates it.
type FinishRequest struct {
	Job         string
	ScheduledAt time.Time
	Owner       Owner
	Token       uint64
	Outcome     Outcome
}

// Outcome is what Finish records.
type Outcome struct {
	State    RunState // Succeeded or Failed
	Duration time.Duration
	Result   string // any bytes; stored as CleanText(Result, MaxResultLen)
	Error    string // any bytes; stored as CleanText(Error, MaxErrorLen)
}

// MetaSep starts the reserved part of a name. A job name cannot contain
// it (job names are paths of [A-Za-z0-9._-]), so the scheduler names a
// job's metadata records (Records) "<job>!<kind>…": its schedule versions,
// their superseded marks, its pause state, the uses of its trigger keys
// (docs/records.md). Earlier releases kept those records as runs of the
// ledger under the same names, and a scheduler still fences such a
// release off with one (schedule/legacy.go): ListRuns without a Job leaves
// every such name out, as it is not a run (many are dated at the epoch).
const MetaSep = "!"

// IsJobMeta reports whether a ledger name is in the reserved space of job
// metadata (it contains MetaSep).
func IsJobMeta(name string) bool { return strings.Contains(name, MetaSep) }

// RunFilter selects history for List. Zero fields select everything.
type RunFilter struct {
	// Job selects one ledger name. Empty: every job's runs, never job
	// metadata (see MetaSep); a metadata name selects its records.
	Job    string
	State  RunState
	Since  time.Time // ScheduledAt >= Since
	Before time.Time // ScheduledAt < Before (also the paging cursor)
	Limit  int       // ≤ 0: a backend default of 100
}

// Ledger is the run-ledger half of the contract, used by the scheduler:
// the runs, and beside them the records of job metadata (Records).
type Ledger interface {
	Records

	// Claim claims an occurrence. The first claim wins and returns a token
	// greater than every token returned before for the job (tokens are per
	// job). A retry by the same owner nonce returns the same grant and renews
	// the runner's lease to the TTL from now, as Heartbeat would. Any other
	// claim of the same occurrence fails with a *ClaimedError, whatever the
	// state: a finished occurrence is never claimed again. Claim also raises
	// the job's high-water mark to ScheduledAt.
	Claim(ctx context.Context, req ClaimRequest) (Grant, error)
	// Heartbeat extends the runner's lease on a running occurrence to
	// req.TTL from now. ErrLeaseLost unless req.Owner+req.Token hold it
	// unexpired.
	Heartbeat(ctx context.Context, req HeartbeatRequest) error
	// Finish records req.Outcome for a running occurrence held by
	// req.Owner+req.Token. ErrLeaseLost otherwise (also when its lease
	// expired, even if nobody reclaimed it yet).
	Finish(ctx context.Context, req FinishRequest) error
	// Reclaim takes over a running occurrence whose runner's lease expired:
	// new owner, greater token, attempt+1, SpecVersion from req. ErrLeaseNotExpired
	// while the lease is live, *ClaimedError if it is finished, ErrNotFound
	// if never claimed, ErrOccurrenceOverlap (nothing changed) when req.MaxRunning > 0
	// and that many other occurrences of the job run under unexpired leases,
	// ErrOccurrenceExhausted (nothing changed) when req.MaxAttempts > 0 and the
	// occurrence already has that many attempts. A retry by the same owner
	// nonce returns the same grant, renewed to the TTL from now, whatever
	// the limits.
	Reclaim(ctx context.Context, req ClaimRequest) (Grant, Run, error)
	// Abandon marks a running occurrence whose runner's lease expired as
	// Abandoned (crash policy skip). ErrLeaseNotExpired while the lease is live.
	Abandon(ctx context.Context, job string, scheduledAt time.Time) (Run, error)
	// GetRun returns one occurrence's record, or ErrNotFound.
	GetRun(ctx context.Context, job string, scheduledAt time.Time) (Run, error)
	// HighWater returns the latest ScheduledAt ever claimed for job and the
	// spec version of that claim; zero time if none. It is kept apart from
	// history: Prune never lowers it.
	HighWater(ctx context.Context, job string) (time.Time, string, error)
	// ListRuns returns history, newest ScheduledAt first. Without
	// f.Job it returns runs only, never the records of job metadata
	// (IsJobMeta), and they take no room of f.Limit.
	ListRuns(ctx context.Context, f RunFilter) ([]Run, error)
	// Prune deletes at most batch finished runs that finished before
	// olderThan, returning how many it deleted. Running occurrences, token
	// counters and high-water marks are never pruned. A run that a
	// concurrent call on its occurrence holds may be skipped (PostgreSQL
	// skips locked rows so that pruners never queue); a later Prune
	// deletes it. Callers loop until it returns fewer than batch, or until
	// their context ends.
	Prune(ctx context.Context, olderThan time.Time, batch int) (int, error)
}

// Instant normalises a scheduled instant the way every backend stores it:
// UTC, truncated to the millisecond.
func Instant(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// CeilInstant returns t in UTC rounded up to the millisecond: the earliest
// stored instant (see Instant) not before t, so that comparing stored
// instants with it equals comparing them with t.
func CeilInstant(t time.Time) time.Time {
	t = t.UTC()
	if r := t.Truncate(time.Millisecond); !r.Equal(t) {
		return r.Add(time.Millisecond)
	}
	return t
}

// FormatOccurrence names an occurrence in messages: job %q at its Instant
// in RFC 3339.
func FormatOccurrence(job string, at time.Time) string {
	return fmt.Sprintf("job %q at %s", job, Instant(at).Format(time.RFC3339Nano))
}

// DefaultRunLimit is how many runs ListRuns returns when RunFilter.Limit ≤ 0.
const DefaultRunLimit = 100

// EffectiveLimit returns f.Limit, or DefaultRunLimit when it is ≤ 0.
func (f RunFilter) EffectiveLimit() int {
	if f.Limit <= 0 {
		return DefaultRunLimit
	}
	return f.Limit
}

// Matches reports whether r passes f's job, state and time filters (not
// the limit); without a Job, job metadata never matches.
func (f RunFilter) Matches(r Run) bool {
	return (f.Job == "" && !IsJobMeta(r.Job) || f.Job != "" && r.Job == f.Job) && (f.State == "" || r.State == f.State) &&
		(f.Since.IsZero() || !r.ScheduledAt.Before(f.Since)) && (f.Before.IsZero() || r.ScheduledAt.Before(f.Before))
}

// Page sorts runs the way ListRuns returns them — newest ScheduledAt first,
// ties by job name — and cuts them to f's limit. For backends that filter
// in memory.
func (f RunFilter) Page(runs []Run) []Run {
	sort.Slice(runs, func(i, j int) bool {
		if !runs[i].ScheduledAt.Equal(runs[j].ScheduledAt) {
			return runs[i].ScheduledAt.After(runs[j].ScheduledAt)
		}
		return runs[i].Job < runs[j].Job
	})
	if limit := f.EffectiveLimit(); len(runs) > limit {
		runs = runs[:limit]
	}
	return runs
}
