package etcd

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// Ledger layout under the prefix (job names are query-escaped, so a job
// containing "/" stays one path segment; instants are 20-digit Unix ms):
//
//	j/<job>                   job record: claim-token counter, high-water mark
//	r/<job>/<instant>         run record (JSON)
//	a/<job>/<instant>         the runner's lease: exists while the runner's
//	                          etcd lease lives; value "<nonce> <token>"
//	f/<finished ns>/<job>/<instant>   index of finished runs, for Prune

type jobRec struct {
	Counter     uint64 `json:"c"`
	High        int64  `json:"h"` // Unix ms; 0 = none
	HighVersion string `json:"v"`
}

type runRec struct {
	Job      string `json:"job"`
	At       int64  `json:"at"` // Unix ms
	Spec     string `json:"spec"`
	Instance string `json:"inst"`
	Nonce    string `json:"nonce"`
	Token    uint64 `json:"tok"`
	Attempt  int    `json:"att"`
	State    string `json:"st"`
	Claimed  int64  `json:"cl"` // Unix ns
	Finished int64  `json:"fin"`
	Dur      int64  `json:"dur"`
	Result   string `json:"res,omitempty"`
	Error    string `json:"err,omitempty"`
}

func escJob(job string) string { return url.QueryEscape(job) }

func instantKey(at time.Time) string { return fmt.Sprintf("%020d", backend.Instant(at).UnixMilli()) }

func (b *Backend) jobKey(job string) string { return b.prefix + "j/" + escJob(job) }

func (b *Backend) runKey(job string, at time.Time) string {
	return b.prefix + "r/" + escJob(job) + "/" + instantKey(at)
}

func (b *Backend) aliveKey(job string, at time.Time) string {
	return b.prefix + "a/" + escJob(job) + "/" + instantKey(at)
}

func (b *Backend) finKey(fin time.Time, job string, at time.Time) string {
	return fmt.Sprintf("%sf/%020d/%s/%s", b.prefix, fin.UnixNano(), escJob(job), instantKey(at))
}

// parseFinKey returns the run key a finished-index key points at.
func (b *Backend) parseFinKey(k string) (string, bool) {
	rest, ok := strings.CutPrefix(k, b.prefix+"f/")
	if !ok {
		return "", false
	}
	_, jobAt, ok := strings.Cut(rest, "/")
	if !ok {
		return "", false
	}
	return b.prefix + "r/" + jobAt, true
}

func aliveValue(o backend.Owner, token uint64) string {
	return o.Nonce.String() + " " + strconv.FormatUint(token, 10)
}

func newRun(req backend.ClaimRequest, token uint64, attempt int, now time.Time) runRec {
	return runRec{
		Job: req.Job, At: backend.Instant(req.ScheduledAt).UnixMilli(), Spec: req.SpecVersion,
		Instance: req.Owner.Instance, Nonce: req.Owner.Nonce.String(), Token: token, Attempt: attempt,
		State: string(backend.Running), Claimed: now.UnixNano(),
	}
}

func (r runRec) owner() backend.Owner {
	n, _ := backend.ParseNonce(r.Nonce)
	return backend.Owner{Instance: r.Instance, Nonce: n}
}

func (r runRec) encode() string {
	b, _ := json.Marshal(r)
	return string(b)
}

func decodeRun(v []byte) (runRec, error) {
	var r runRec
	if err := json.Unmarshal(v, &r); err != nil {
		return r, fmt.Errorf("malformed run record: %w", err)
	}
	return r, nil
}

func decodeJob(v []byte) (jobRec, error) {
	var j jobRec
	if len(v) == 0 {
		return j, nil
	}
	if err := json.Unmarshal(v, &j); err != nil {
		return j, fmt.Errorf("malformed job record: %w", err)
	}
	return j, nil
}

func (j jobRec) encode() string {
	b, _ := json.Marshal(j)
	return string(b)
}

// view is the Run for a record; alive reports the runner's lease key
// exists.
func (r runRec) view(alive bool) backend.Run {
	run := backend.Run{
		Job: r.Job, ScheduledAt: time.UnixMilli(r.At).UTC(), SpecVersion: r.Spec, Owner: r.owner(),
		Token: r.Token, Attempt: r.Attempt, State: backend.RunState(r.State),
		ClaimedAt: time.Unix(0, r.Claimed).UTC(), Duration: time.Duration(r.Dur),
		Result: r.Result, Error: r.Error,
	}
	if r.Finished != 0 {
		run.FinishedAt = time.Unix(0, r.Finished).UTC()
	}
	run.Expired = run.State == backend.Running && !alive
	return run
}

// occurrence names an occurrence in messages.
var occurrence = backend.FormatOccurrence
