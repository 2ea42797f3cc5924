package schedule

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// A failed attempt that is retried (Job.Retry) leaves no record of its
// own in the ledger: the occurrence stays running and its next attempt
// overwrites the runner, token and outcome. So that an operator can still
// see why each attempt failed, the scheduler records every retried
// failure as a record (records.go) named by AttemptKey, at the
// occurrence's instant (seq: its Unix milliseconds), owned by the
// attempt's runner, its value the attempt's token, outcome and finish time
// (attemptValue); ReadAttempt reads it back. The final attempt is the
// occurrence's own record. A crash recovery's earlier attempt (its runner
// died) has no such record: nothing reported why. The records expire with
// the history retention.

const attemptInfix = backend.MetaSep + "attempt" + backend.MetaSep

// AttemptKey is the record name under which a retried failure of attempt
// n of job's occurrences is recorded (see the package's notes on failed
// attempts): "<job>!attempt!<n>".
func AttemptKey(job string, n int) string { return job + attemptInfix + strconv.Itoa(n) }

// recordAttempt records the failure of attempt r.Attempt (held by owner
// with its token) before it is retried. It is best effort: the retry does
// not depend on it, so an error is logged by the caller only.
func (s *Scheduler) recordAttempt(ctx context.Context, r Run, owner backend.Owner, out backend.Outcome) error {
	out, err := backend.CheckOutcome(out)
	if err != nil {
		return err
	}
	a := attemptValue{Token: uint64(r.Token), State: out.State, Duration: out.Duration,
		Result: out.Result, Error: out.Error, Finished: s.cfg.clock.Now().UTC()}
	v, _ := json.Marshal(a)                  // strings, numbers and a time: cannot fail
	for len(v) > backend.MaxRecordValueLen { // texts that JSON escapes at length
		a.Result = backend.CleanText(a.Result, len(a.Result)/2)
		a.Error = backend.CleanText(a.Error, len(a.Error)/2)
		v, _ = json.Marshal(a)
	}
	_, _, err = createRecord(ctx, s.l, backend.CreateRecordRequest{
		Name: AttemptKey(r.Job, r.Attempt), Seq: seqOf(r.ScheduledAt), Value: string(v),
		Owner: owner, Expires: s.recordExpiry(),
	})
	return err
}

// ReadAttempt returns the recorded failure of attempt n of job's
// occurrence at at, as a Run (its Token, Owner, State, Duration, Result,
// Error and FinishedAt; SpecVersion the token in decimal, as earlier
// releases kept it), or backend.ErrNotFound. l must be confined to the
// job's namespace (NamespaceLedger). A record of an earlier release is
// read where that release kept it.
func ReadAttempt(ctx context.Context, l backend.Ledger, job string, n int, at time.Time) (backend.Run, error) {
	name, seq := AttemptKey(job, n), seqOf(at)
	rs, err := l.ListRecords(ctx, backend.ListRecordsRequest{Name: name, Before: seq + 1, Limit: 1})
	if err != nil {
		return backend.Run{}, err
	}
	if len(rs) == 0 || rs[0].Seq != seq {
		return l.GetRun(ctx, name, at) // an earlier release's, or ErrNotFound
	}
	var v attemptValue
	if err := json.Unmarshal([]byte(rs[0].Value), &v); err != nil {
		return backend.Run{}, fmt.Errorf("attempt record %q seq %d (%.40q): %w", name, seq, rs[0].Value, errBadRecord)
	}
	return backend.Run{
		Job: name, ScheduledAt: instantOf(seq), SpecVersion: strconv.FormatUint(v.Token, 10), Owner: rs[0].Owner,
		Token: v.Token, Attempt: n, State: v.State, FinishedAt: v.Finished, Duration: v.Duration, Result: v.Result, Error: v.Error,
	}, nil
}
