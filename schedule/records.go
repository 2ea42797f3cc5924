package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/guard"
)

// Job metadata. The scheduler keeps a job's schedule versions, their
// superseded marks, its pause state, the uses of its trigger keys and its
// retried attempts' failures as records of the backend's record store
// (backend.Records), apart from its runs. A record's name is the job's
// name, backend.MetaSep and the kind of metadata (versionSuffix,
// supersededInfix, pauseInfix, triggerInfix, attemptInfix): the names
// earlier releases gave these records when they kept them as runs of the
// ledger (legacy.go carries those over). docs/records.md says how each kind
// maps onto records.

// recordTries bounds how often createRecord sends one create.
const recordTries = 3

// createRecord creates req in l, retrying at once (with req's nonce, so a
// retry of a create that was applied answers "mine") a create whose
// outcome is unknown, recordTries times at most. Answers (ErrInvalid,
// ErrClosed) are returned as they are; a failure after a create that may
// have been applied wraps leasehold.ErrOutcomeIndeterminate.
func createRecord(ctx context.Context, l backend.Ledger, req backend.CreateRecordRequest) (backend.Record, bool, error) {
	var (
		err     error
		unknown bool // an earlier create may have been applied
	)
	for range recordTries {
		var (
			r    backend.Record
			mine bool
		)
		r, mine, err = l.CreateRecord(ctx, req)
		switch {
		case err == nil:
			return r, mine, nil
		case guard.Answer(err):
			if unknown {
				return backend.Record{}, false, fmt.Errorf("%w: record %q seq %d: an earlier create's outcome is unknown: %w", leasehold.ErrOutcomeIndeterminate, req.Name, req.Seq, err)
			}
			return backend.Record{}, false, err
		}
		unknown = unknown || !errors.Is(err, backend.ErrNotApplied)
		if ctx.Err() != nil {
			break
		}
	}
	if unknown {
		return backend.Record{}, false, fmt.Errorf("%w: record %q seq %d: %w", leasehold.ErrOutcomeIndeterminate, req.Name, req.Seq, err)
	}
	return backend.Record{}, false, err
}

// latestRecord returns the record of name with the greatest seq; ok is
// false if name has none.
func latestRecord(ctx context.Context, l backend.Ledger, name string) (r backend.Record, ok bool, err error) {
	rs, err := l.ListRecords(ctx, backend.ListRecordsRequest{Name: name, Limit: 1})
	if err != nil || len(rs) == 0 {
		return backend.Record{}, false, err
	}
	return rs[0], true, nil
}

// seqOf is the record seq of a scheduled instant: its Unix milliseconds.
func seqOf(at time.Time) int64 { return backend.Instant(at).UnixMilli() }

// instantOf is the instant of a record seq made by seqOf.
func instantOf(seq int64) time.Time { return time.UnixMilli(seq).UTC() }

// versionValue is the value of a schedule-version record: the version and
// the spec it names (shown by every instance).
type versionValue struct {
	Version  string    `json:"version"`
	Spec     string    `json:"spec,omitempty"`
	Recorded time.Time `json:"recorded,omitzero"` // the recording instance's clock
}

func (v versionValue) encode() string {
	b, _ := json.Marshal(v) // strings only: cannot fail
	return string(b)
}

func decodeVersion(r backend.Record) (versionValue, error) {
	var v versionValue
	if err := json.Unmarshal([]byte(r.Value), &v); err != nil || v.Version == "" {
		return versionValue{}, fmt.Errorf("schedule version record %q seq %d is not a version (%q): %w", r.Name, r.Seq, r.Value, errBadRecord)
	}
	return v, nil
}

// errBadRecord: a record under a scheduler's name that the scheduler did
// not write (or a later release wrote differently).
var errBadRecord = errors.New("not a record this scheduler wrote")

// attemptValue is the value of a retried attempt's failure record.
type attemptValue struct {
	Token    uint64           `json:"token,string"`
	State    backend.RunState `json:"state"`
	Duration time.Duration    `json:"duration_ns"`
	Result   string           `json:"result,omitempty"`
	Error    string           `json:"error,omitempty"`
	Finished time.Time        `json:"finished"`
}
