package schedule

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// Where a version is refused. An instance that refuses its schedule
// version (version.go) says so in the ledger, under the reserved name
// "<job>!refused", so that every instance, whatever config it runs, can
// show where the job's replaced spec is still deployed: one finished
// record per statement, at the instant it was made (ScheduledAt, ms),
// naming the instance (its owner), the refused version (SpecVersion) and
// the spec (Result). An instance says it when it refuses (at start-up, at
// a reload), and withdraws it — a record with no version — when it next
// registers the job without refusing or removes it. ReadRefusals keeps
// each instance's newest statement that is a refusal; a reader that knows
// which instances are alive (the daemon's instance leases) leaves out the
// dead ones, which withdraw nothing. Statements are made only on those
// events, so their number grows with deploys, not with time; Prune removes
// old ones as it removes runs.

const refusedSuffix = backend.MetaSep + "refused"

// refusalTimeout bounds one statement's ledger calls: made at a
// registration or a removal, they must not hold it up for long.
const refusalTimeout = 5 * time.Second

// Refusal is one instance's refusal of its schedule version for a job.
type Refusal struct {
	Instance string
	Version  string
	Spec     string
	// At is when the instance said it (by its clock).
	At time.Time
}

// sayRefused records that this instance refuses e's version now.
func (s *Scheduler) sayRefused(ctx context.Context, e *entry) {
	s.state(ctx, e.job.Name, e.spec.Version(), e.spec.String())
}

// withdrawRefusal records that this instance no longer refuses a version
// of job, if its newest statement says it does.
func (s *Scheduler) withdrawRefusal(ctx context.Context, job string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refusalTimeout)
	defer cancel()
	runs, err := s.l.ListRuns(ctx, backend.RunFilter{Job: job + refusedSuffix, Limit: 100})
	if err != nil {
		return // nothing is said wrong for long: a later registration tries again
	}
	for _, r := range runs { // newest first
		if r.Owner.Instance == s.cfg.instance {
			if r.SpecVersion != "" {
				s.state(ctx, job, "", "withdrawn")
			}
			return
		}
	}
}

// state records one statement of this instance about job: version refused
// (spec its spec), or "" for none. A failure is logged.
func (s *Scheduler) state(ctx context.Context, job, version, spec string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refusalTimeout)
	defer cancel()
	at := s.cfg.clock.Now().UTC().Truncate(time.Millisecond)
	owner := backend.Owner{Instance: s.cfg.instance, Nonce: backend.NewNonce()}
	var err error
	// An instant already taken (another statement the same millisecond,
	// this instance's own included) is followed by the next one: the
	// newest statement must be the last one made.
	for range 100 {
		req := backend.ClaimRequest{
			Job: job + refusedSuffix, ScheduledAt: at, SpecVersion: version,
			Owner: owner, TTL: time.Minute, MaxEarly: time.Hour, // clocks differ
		}
		var g backend.Grant
		if g, err = s.l.Claim(ctx, req); errors.Is(err, backend.ErrOccurrenceClaimed) {
			at = at.Add(time.Millisecond)
			continue
		}
		if err == nil {
			err = s.l.Finish(ctx, backend.FinishRequest{Job: req.Job, ScheduledAt: at, Owner: owner, Token: g.Token,
				Outcome: backend.Outcome{State: backend.Succeeded, Result: spec}})
		}
		break
	}
	if err != nil {
		s.cfg.logger.Warn("recording where the job's schedule version is refused failed; other instances may not show it", "job", job, "err", err)
	}
}

// ReadRefusals returns the instances that refuse their schedule version
// of job, as said in l (confined to the job's namespace: see
// NamespaceLedger), by instance name: each instance's newest finished
// statement, if it is a refusal. alive, if not nil, says which instances
// are alive: the others are left out (a dead instance withdraws nothing).
func ReadRefusals(ctx context.Context, l backend.Ledger, job string, alive func(instance string) bool) ([]Refusal, error) {
	runs, err := l.ListRuns(ctx, backend.RunFilter{Job: job + refusedSuffix, Limit: 200})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []Refusal
	for _, r := range runs { // newest first
		if r.State != backend.Succeeded || seen[r.Owner.Instance] {
			continue // a statement whose recording failed halfway says nothing
		}
		seen[r.Owner.Instance] = true
		if r.SpecVersion == "" || (alive != nil && !alive(r.Owner.Instance)) {
			continue
		}
		out = append(out, Refusal{Instance: r.Owner.Instance, Version: r.SpecVersion, Spec: r.Result, At: r.ScheduledAt})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Instance < out[j].Instance })
	return out, nil
}
