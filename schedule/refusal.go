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
// the spec (Result). The refusing Scheduler says it when it refuses and
// again every refusalEvery while it refuses; ReadRefusals keeps each
// instance's newest record made within RefusalFresh, so an instance that
// stopped refusing (a new revision, the current config) or is gone drops
// out within that time. Prune removes old records as it removes runs.

const refusedSuffix = backend.MetaSep + "refused"

// refusalEvery is how often a refusing Scheduler says again that it
// refuses.
const refusalEvery = time.Minute

// RefusalFresh is how long a refusal, once said, is shown: an instance
// that refuses says it again well within it.
const RefusalFresh = 3 * refusalEvery

// Refusal is one instance's refusal of its schedule version for a job.
type Refusal struct {
	Instance string
	Version  string
	Spec     string
	// At is when the instance last said it (by its clock).
	At time.Time
}

// sayRefused records that this instance refuses e's version now. A
// failure is logged: the refusal is said again within refusalEvery.
func (s *Scheduler) sayRefused(ctx context.Context, e *entry) {
	at := s.cfg.clock.Now().UTC().Truncate(time.Millisecond)
	owner := backend.Owner{Instance: s.cfg.instance, Nonce: backend.NewNonce()}
	req := backend.ClaimRequest{
		Job: e.job.Name + refusedSuffix, ScheduledAt: at, SpecVersion: e.spec.Version(),
		Owner: owner, TTL: time.Minute, MaxEarly: time.Minute, // clocks differ
	}
	g, err := s.l.Claim(ctx, req)
	if err == nil {
		err = s.l.Finish(ctx, backend.FinishRequest{Job: req.Job, ScheduledAt: at, Owner: owner, Token: g.Token,
			Outcome: backend.Outcome{State: backend.Succeeded, Result: e.spec.String()}})
	}
	if err != nil && !errors.Is(err, backend.ErrOccurrenceClaimed) { // claimed: another instance, the same millisecond
		s.cfg.logger.Warn("recording where the job's schedule version is refused failed; other instances may not show it", "job", e.job.Name, "err", err)
	}
}

// refusalLoop says again, every refusalEvery, each refusal in force.
func (s *Scheduler) refusalLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.clock.After(refusalEvery):
		}
		s.mu.Lock()
		var refused []*entry
		for _, e := range s.jobs {
			if _, _, r := e.vc.state(); r {
				refused = append(refused, e)
			}
		}
		s.mu.Unlock()
		for _, e := range refused {
			s.sayRefused(ctx, e)
		}
	}
}

// ReadRefusals returns the instances that refuse their schedule version
// of job, as said in l (confined to the job's namespace: see
// NamespaceLedger) within RefusalFresh before now, by instance name.
func ReadRefusals(ctx context.Context, l backend.Ledger, job string, now time.Time) ([]Refusal, error) {
	runs, err := l.ListRuns(ctx, backend.RunFilter{Job: job + refusedSuffix, Since: now.Add(-RefusalFresh), Limit: 100})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []Refusal
	for _, r := range runs { // newest first
		if seen[r.Owner.Instance] {
			continue
		}
		seen[r.Owner.Instance] = true
		out = append(out, Refusal{Instance: r.Owner.Instance, Version: r.SpecVersion, Spec: r.Result, At: r.ScheduledAt})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Instance < out[j].Instance })
	return out, nil
}
