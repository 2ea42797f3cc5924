package schedule

import (
	"context"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// A failed attempt that is retried (Job.Retry) leaves no record of its
// own in the ledger: the occurrence stays running and its next attempt
// overwrites the runner, token and outcome. So that an operator can still
// see why each attempt failed, the scheduler records every retried
// failure as a job-metadata record (backend.MetaSep) named by AttemptKey:
// ScheduledAt is the occurrence's instant, Owner the attempt's runner,
// SpecVersion the attempt's fencing token (decimal), State Failed, Error
// the attempt's error, Result its output and Duration how long it ran. The
// final attempt is the occurrence's own record. A crash recovery's earlier
// attempt (its runner died) has no such record: nothing reported why.
// Prune deletes these records as it does runs (finished, by when they
// finished).

const attemptInfix = backend.MetaSep + "attempt" + backend.MetaSep

// AttemptKey is the ledger name under which a retried failure of attempt
// n of job's occurrences is recorded (see the package's notes on failed
// attempts): "<job>!attempt!<n>".
func AttemptKey(job string, n int) string { return job + attemptInfix + strconv.Itoa(n) }

// attemptRecordTTL is the lease of an attempt record between its claim and
// its finish (two calls in a row).
const attemptRecordTTL = time.Minute

// recordAttempt records the failure of attempt r.Attempt (held by owner
// with its token) before it is retried. It is best effort: the retry does
// not depend on it, so an error is logged by the caller only.
func (s *Scheduler) recordAttempt(ctx context.Context, r Run, owner backend.Owner, out backend.Outcome) error {
	key := AttemptKey(r.Job, r.Attempt)
	rec := backend.Owner{Instance: owner.Instance, Nonce: backend.NewNonce()}
	g, err := s.l.Claim(ctx, backend.ClaimRequest{
		Job: key, ScheduledAt: r.ScheduledAt, SpecVersion: strconv.FormatUint(uint64(r.Token), 10), Owner: rec,
		TTL: attemptRecordTTL, MaxEarly: 100 * 365 * 24 * time.Hour, // the instant may be ahead of the backend's clock
	})
	if err != nil {
		return err
	}
	return s.l.Finish(ctx, backend.FinishRequest{Job: key, ScheduledAt: r.ScheduledAt, Owner: rec, Token: g.Token, Outcome: out})
}
