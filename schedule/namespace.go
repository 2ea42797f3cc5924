package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
)

// LedgerJob returns the name under which the run ledger keeps job of
// namespace: the bare name in the default namespace (so ledgers written
// before namespaces keep their history) and "<namespace>:<job>" in any
// other. Job names and namespaces cannot contain ':', so no two
// (namespace, job) pairs share a ledger name.
func LedgerJob(namespace, job string) string {
	if namespace == leasehold.DefaultNamespace {
		return job
	}
	return namespace + ":" + job
}

// CheckKeyLengths reports whether every ledger name the scheduler keeps for
// job in namespace (its occurrences, schedule versions and their superseded
// marks, and pause state) fits
// in backend.MaxKeyLen; a job name and a namespace that are each valid can
// together be too long, which would fail every occurrence at run time. The
// error wraps leasehold.ErrInvalid and names the name, its length and the
// limit.
func CheckKeyLengths(namespace, job string) error {
	for _, name := range []string{job, job + versionSuffix, supersededKey(job, "0123456789abcdef"), job + pauseInfix + namespace} {
		if n := len(LedgerJob(namespace, name)); n > backend.MaxKeyLen {
			return fmt.Errorf("%w: job name %q in namespace %q makes the ledger name %.40q… of %d bytes, more than the limit of %d (shorten the job name or the namespace)",
				leasehold.ErrInvalid, job, namespace, LedgerJob(namespace, name), n, backend.MaxKeyLen)
		}
	}
	return nil
}

// NamespaceLedger returns a view of l confined to namespace: every job
// name is mapped with LedgerJob on the way in and back on the way out, and
// listings leave out other namespaces' runs. Two namespaces sharing a
// backend may then use the same job names without sharing claims, high-water
// marks, pauses or history. Prune is not confined: retention is one policy
// for the whole backend. Every Scheduler uses this view; tools that read a
// namespace's ledger (the admin API, "leasehold runs") should too.
func NamespaceLedger(l backend.Ledger, namespace string) backend.Ledger {
	return nsLedger{Ledger: l, ns: namespace}
}

type nsLedger struct {
	backend.Ledger
	ns string
}

func (l nsLedger) in(job string) string { return LedgerJob(l.ns, job) }

// out maps a ledger name back, and reports whether it is this namespace's.
func (l nsLedger) out(name string) (string, bool) {
	if l.ns == leasehold.DefaultNamespace {
		return name, !strings.Contains(name, ":")
	}
	job, ok := strings.CutPrefix(name, l.ns+":")
	return job, ok
}

func (l nsLedger) run(r backend.Run) backend.Run {
	r.Job, _ = l.out(r.Job)
	return r
}

func (l nsLedger) err(err error) error {
	var ce *backend.ClaimedError
	if errors.As(err, &ce) {
		ce.Run = l.run(ce.Run)
	}
	return err
}

func (l nsLedger) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	req.Job = l.in(req.Job)
	g, err := l.Ledger.Claim(ctx, req)
	return g, l.err(err)
}

func (l nsLedger) Heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	req.Job = l.in(req.Job)
	return l.Ledger.Heartbeat(ctx, req)
}

func (l nsLedger) Finish(ctx context.Context, req backend.FinishRequest) error {
	req.Job = l.in(req.Job)
	return l.Ledger.Finish(ctx, req)
}

func (l nsLedger) Reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	req.Job = l.in(req.Job)
	g, r, err := l.Ledger.Reclaim(ctx, req)
	return g, l.run(r), l.err(err)
}

func (l nsLedger) Abandon(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	r, err := l.Ledger.Abandon(ctx, l.in(job), at)
	return l.run(r), l.err(err)
}

func (l nsLedger) GetRun(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	r, err := l.Ledger.GetRun(ctx, l.in(job), at)
	return l.run(r), l.err(err)
}

func (l nsLedger) HighWater(ctx context.Context, job string) (time.Time, string, error) {
	return l.Ledger.HighWater(ctx, l.in(job))
}

// The record calls map a record's name as a job name is mapped;
// PruneRecords, like Prune, is not confined.

func (l nsLedger) record(r backend.Record) backend.Record {
	r.Name, _ = l.out(r.Name)
	return r
}

func (l nsLedger) CreateRecord(ctx context.Context, req backend.CreateRecordRequest) (backend.Record, bool, error) {
	req.Name = l.in(req.Name)
	r, mine, err := l.Ledger.CreateRecord(ctx, req)
	return l.record(r), mine, err
}

func (l nsLedger) ListRecords(ctx context.Context, req backend.ListRecordsRequest) ([]backend.Record, error) {
	req.Name = l.in(req.Name)
	rs, err := l.Ledger.ListRecords(ctx, req)
	for i := range rs {
		rs[i] = l.record(rs[i])
	}
	return rs, err
}

func (l nsLedger) DeleteRecord(ctx context.Context, req backend.DeleteRecordRequest) error {
	req.Name = l.in(req.Name)
	return l.Ledger.DeleteRecord(ctx, req)
}

// ListRuns with a job maps the name; without one it lists every job and
// keeps this namespace's runs, fetching older pages until it has the limit.
func (l nsLedger) ListRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	if f.Job != "" {
		f.Job = l.in(f.Job)
		rs, err := l.Ledger.ListRuns(ctx, f)
		for i := range rs {
			rs[i] = l.run(rs[i])
		}
		return rs, err
	}
	limit := f.EffectiveLimit()
	f.Limit = max(2*limit, backend.DefaultRunLimit)
	type occ struct {
		job string
		at  time.Time
	}
	seen := map[occ]bool{}
	var out []backend.Run
	for {
		rs, err := l.Ledger.ListRuns(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			job, ok := l.out(r.Job)
			k := occ{r.Job, r.ScheduledAt}
			if !ok || seen[k] {
				continue
			}
			seen[k] = true
			r.Job = job
			out = append(out, r)
		}
		if len(out) >= limit || len(rs) < f.Limit {
			break
		}
		// The next page: older instants. The last instant may hold more
		// runs than fitted; fetch it again and skip what was seen.
		f.Before = rs[len(rs)-1].ScheduledAt.Add(time.Millisecond)
		if !rs[0].ScheduledAt.After(rs[len(rs)-1].ScheduledAt) {
			f.Limit *= 2 // one instant fills the page: widen it
		}
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
