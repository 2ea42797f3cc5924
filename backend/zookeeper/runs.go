package zookeeper

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/backend"
)

// Ledger layout (hierarchical: every parent's children are bounded by the
// runs of one job in one hour, or by the number of jobs):
//
//	<prefix>/jobs/<job>                       job record: counter, high-water mark
//	<prefix>/jobs/<job>/runs/<hour>/<instant> run record (JSON)
//	<prefix>/jobs/<job>/alive/<instant>       runner's lease: ephemeral, "<nonce> <token>"
//	<prefix>/fin/<hour>/<finished ns>_<job>_<instant>  finished-run index (Prune)
//
// <hour> is "2006010215" in UTC, <instant> is 20-digit Unix ms, <finished
// ns> 20-digit Unix ns.

type jobRec struct {
	Counter     uint64 `json:"c"`
	High        int64  `json:"h"`
	HighVersion string `json:"v"`
}

type runRec struct {
	Job      string `json:"job"`
	At       int64  `json:"at"`
	Spec     string `json:"spec"`
	Instance string `json:"inst"`
	Nonce    string `json:"nonce"`
	Token    uint64 `json:"tok"`
	Attempt  int    `json:"att"`
	State    string `json:"st"`
	Claimed  int64  `json:"cl"`
	Finished int64  `json:"fin"`
	Dur      int64  `json:"dur"`
	Result   string `json:"res,omitempty"`
	Error    string `json:"err,omitempty"`
}

func hour(t time.Time) string { return t.UTC().Format("2006010215") }

func ms20(at time.Time) string { return fmt.Sprintf("%020d", backend.Instant(at).UnixMilli()) }

func (b *Backend) jobPath(job string) string { return b.prefix + "/jobs/" + escape(job) }

func (b *Backend) runPath(job string, at time.Time) string {
	return b.jobPath(job) + "/runs/" + hour(backend.Instant(at)) + "/" + ms20(at)
}

func (b *Backend) alivePath(job string, at time.Time) string {
	return b.jobPath(job) + "/alive/" + ms20(at)
}

func (b *Backend) finPath(fin time.Time, job string, at time.Time) string {
	return fmt.Sprintf("%s/fin/%s/%020d_%s_%s", b.prefix, hour(fin), fin.UnixNano(), escape(job), ms20(at))
}

// parseFin returns the finish time and the run path an index entry names.
func (b *Backend) parseFin(name string) (int64, string, bool) {
	if len(name) < 20+1+1+1+20 {
		return 0, "", false
	}
	fin, err := strconv.ParseInt(name[:20], 10, 64)
	if err != nil {
		return 0, "", false
	}
	ej, at := name[21:len(name)-21], name[len(name)-20:]
	ms, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return 0, "", false
	}
	return fin, b.prefix + "/jobs/" + ej + "/runs/" + hour(time.UnixMilli(ms)) + "/" + at, true
}

func aliveValue(o backend.Owner, token uint64) []byte {
	return []byte(o.Nonce.String() + " " + strconv.FormatUint(token, 10))
}

func newRun(req backend.ClaimRequest, token uint64, attempt int) runRec {
	return runRec{
		Job: req.Job, At: backend.Instant(req.ScheduledAt).UnixMilli(), Spec: req.SpecVersion,
		Instance: req.Owner.Instance, Nonce: req.Owner.Nonce.String(), Token: token, Attempt: attempt,
		State: string(backend.Running), Claimed: time.Now().UnixNano(),
	}
}

func (r runRec) owner() backend.Owner {
	n, _ := backend.ParseNonce(r.Nonce)
	return backend.Owner{Instance: r.Instance, Nonce: n}
}

func (r runRec) encode() []byte { v, _ := json.Marshal(r); return v }

func (j jobRec) encode() []byte { v, _ := json.Marshal(j); return v }

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

func (r runRec) view(alive bool) backend.Run {
	run := backend.Run{
		Job: r.Job, ScheduledAt: time.UnixMilli(r.At).UTC(), SpecVersion: r.Spec, Owner: r.owner(),
		Token: r.Token, Attempt: r.Attempt, State: backend.RunState(r.State),
		ClaimedAt: time.Unix(0, r.Claimed).UTC(), Duration: time.Duration(r.Dur), Result: r.Result, Error: r.Error,
	}
	if r.Finished != 0 {
		run.FinishedAt = time.Unix(0, r.Finished).UTC()
	}
	run.Expired = run.State == backend.Running && !alive
	return run
}

// occurrence names an occurrence in messages.
var occurrence = backend.FormatOccurrence

// occ is one read of an occurrence: run record and runner's lease node.
type occ struct {
	run      *runRec
	runVer   int32
	runZxid  int64 // the run node's Mzxid: changes with every write
	alive    []byte
	aliveVer int32
}

// readOcc reads an occurrence: its run node, then its runner's lease node.
// The two reads are one snapshot: ZooKeeper has no multi-read here, so
// when the lease node does not match a running run (absent, or another
// runner's), the run node is read again, and the pair is taken only if
// the run node did not change in between (same Mzxid: every write and
// every re-creation after a Prune has a new one). Every write that
// changes the lease node of a running run also writes the run node
// (Finish, Abandon, Reclaim), except expiry, which deletes the lease
// node alone — and "running, lease gone" is then a state that was.
// Without this a Finish between the reads looked like an expired lease
// (TestReclaimReadsRunAndLeaseTogether).
func (b *Backend) readOcc(job string, at time.Time) (occ, error) {
	rp := b.runPath(job, at)
	for {
		var o occ
		data, st, err := b.conn.Get(rp)
		switch {
		case err == zk.ErrNoNode:
			return o, nil
		case err != nil:
			return o, b.wrap(err, "read "+occurrence(job, at))
		}
		r, err := decodeRun(data)
		if err != nil {
			return o, err
		}
		o.run, o.runVer, o.runZxid = &r, st.Version, st.Mzxid
		b.hooks.onRunRead(rp)
		a, ast, err := b.conn.Get(b.alivePath(job, at))
		switch {
		case err == zk.ErrNoNode:
		case err != nil:
			return o, b.wrap(err, "read the runner's lease of "+occurrence(job, at))
		default:
			o.alive, o.aliveVer = a, ast.Version
		}
		if r.State != string(backend.Running) || string(o.alive) == string(aliveValue(r.owner(), r.Token)) {
			// Finished: the lease node plays no part. Running with its
			// own lease node: the run cannot have changed while that
			// node lived (a write of the run deletes or replaces it).
			return o, nil
		}
		ok, again, err := b.conn.Exists(rp)
		if err != nil {
			return o, b.wrap(err, "read "+occurrence(job, at))
		}
		if ok && again.Mzxid == st.Mzxid {
			return o, nil
		}
	}
}

// readJob returns the job record and its version (-1: absent).
func (b *Backend) readJob(job string) (jobRec, int32, error) {
	data, st, err := b.conn.Get(b.jobPath(job))
	if err == zk.ErrNoNode {
		return jobRec{}, -1, nil
	}
	if err != nil {
		return jobRec{}, 0, b.wrap(err, fmt.Sprintf("read job %q", job))
	}
	j, err := decodeJob(data)
	return j, st.Version, err
}

// multi runs ops atomically. retry reports a guard failure (a racing
// writer, or a missing parent, which it creates): read again and retry.
func (b *Backend) multi(what string, parents []string, ops ...any) (retry bool, err error) {
	_, err = b.conn.Multi(ops...)
	switch err {
	case nil:
		return false, nil
	case zk.ErrNoNode:
		for _, p := range parents {
			if err := b.ensure(p); err != nil {
				return false, err
			}
		}
		return true, nil
	case zk.ErrBadVersion, zk.ErrNodeExists, zk.ErrNotEmpty:
		return true, nil
	}
	return false, b.wrapSent(err, what)
}
