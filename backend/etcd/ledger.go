package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/backend"
)

// snapshot is one consistent read of an occurrence: run, job and runner's
// lease key, all at one revision.
type snapshot struct {
	run, job, alive *mvccpb.KeyValue
	rev             int64 // the revision read: a count of running occurrences is taken at it too
}

func first(r *etcdserverpb.ResponseOp) *mvccpb.KeyValue {
	if kvs := r.GetResponseRange().Kvs; len(kvs) > 0 {
		return kvs[0]
	}
	return nil
}

func modRev(kv *mvccpb.KeyValue) int64 {
	if kv == nil {
		return 0
	}
	return kv.ModRevision
}

func (b *Backend) read(ctx context.Context, job string, at time.Time) (snapshot, error) {
	resp, err := b.c.Txn(ctx).Then(
		clientv3.OpGet(b.runKey(job, at)), clientv3.OpGet(b.jobKey(job)), clientv3.OpGet(b.aliveKey(job, at)),
	).Commit()
	if err != nil {
		return snapshot{}, b.fail(err, "read the occurrence")
	}
	return snapshot{run: first(resp.Responses[0]), job: first(resp.Responses[1]), alive: first(resp.Responses[2]), rev: resp.Header.Revision}, nil
}

// leaseFor grants the runner's lease for a claim, once per call.
type leaseFor struct {
	b   *Backend
	ttl time.Duration
	id  clientv3.LeaseID
	got time.Duration
}

func (l *leaseFor) get(ctx context.Context) (clientv3.LeaseID, error) {
	if l.id != 0 {
		return l.id, nil
	}
	lg, err := l.b.c.Grant(ctx, ttlSeconds(l.ttl))
	if err != nil {
		return 0, l.b.fail(err, "grant a runner's lease")
	}
	l.id, l.got = lg.ID, time.Duration(lg.TTL)*time.Second
	return l.id, nil
}

// unused revokes the lease if the claim did not use it.
func (l *leaseFor) unused() {
	if l.id != 0 {
		l.b.revoke(l.id)
	}
}

// yours answers a retry by the running owner: a keep-alive of its lease, so
// the TTL counts from the retry.
func (b *Backend) yours(ctx context.Context, s snapshot, r runRec, job string, at time.Time) (backend.Grant, error) {
	if s.alive == nil {
		return backend.Grant{}, fmt.Errorf("%w: %s, token %d: the runner's lease expired", backend.ErrLeaseLost, occurrence(job, at), r.Token)
	}
	ka, err := b.keepAlive(ctx, clientv3.LeaseID(s.alive.Lease))
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return backend.Grant{}, fmt.Errorf("%w: %s, token %d: the runner's lease expired", backend.ErrLeaseLost, occurrence(job, at), r.Token)
		}
		return backend.Grant{}, b.fail(err, "renew the runner's lease")
	}
	return backend.Grant{Token: r.Token, TTL: ka}, nil
}

// Claim implements backend.Ledger: a compare-and-swap on the job record
// (its counter gives the token) that creates the run and the runner's lease
// key, retried when another claim of the job won the race.
func (b *Backend) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	return b.g.Claim(ctx, req, b.claim)
}

func (b *Backend) claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	at := backend.Instant(req.ScheduledAt)
	lf := &leaseFor{b: b, ttl: req.TTL}
	used := false
	defer func() {
		if !used {
			lf.unused()
		}
	}()
	for {
		s, err := b.read(ctx, req.Job, at)
		if err != nil {
			return backend.Grant{}, err
		}
		if s.run != nil {
			r, err := decodeRun(s.run.Value)
			if err != nil {
				return backend.Grant{}, err
			}
			if r.owner() == req.Owner && r.State == string(backend.Running) {
				return b.yours(ctx, s, r, req.Job, at)
			}
			return backend.Grant{}, &backend.ClaimedError{Run: r.view(s.alive != nil)}
		}
		now := time.Now()
		if at.After(now.Add(req.MaxEarly)) {
			return backend.Grant{}, fmt.Errorf("%w: %s, clock %s, max early %v",
				backend.ErrOccurrenceTooEarly, occurrence(req.Job, at), now.UTC().Format(time.RFC3339Nano), req.MaxEarly)
		}
		if req.MaxLate > 0 && at.Before(now.Add(-req.MaxLate)) {
			return backend.Grant{}, fmt.Errorf("%w: %s, clock %s, max late %v",
				backend.ErrOccurrenceTooLate, occurrence(req.Job, at), now.UTC().Format(time.RFC3339Nano), req.MaxLate)
		}
		if req.MaxRunning > 0 {
			cr, err := b.c.Get(ctx, b.prefix+"a/"+escJob(req.Job)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithRev(s.rev))
			if err != nil {
				return backend.Grant{}, b.fail(err, "count running occurrences")
			}
			if int(cr.Count) >= req.MaxRunning {
				return backend.Grant{}, fmt.Errorf("%w: job %q has %d running, max %d", backend.ErrOccurrenceOverlap, req.Job, cr.Count, req.MaxRunning)
			}
		}
		j, err := decodeJob(valueOf(s.job))
		if err != nil {
			return backend.Grant{}, err
		}
		id, err := lf.get(ctx)
		if err != nil {
			return backend.Grant{}, err
		}
		j.Counter++
		if at.UnixMilli() > j.High || j.High == 0 {
			j.High, j.HighVersion = at.UnixMilli(), req.SpecVersion
		}
		rec := newRun(req, j.Counter, 1, now)
		rk, jk, ak := b.runKey(req.Job, at), b.jobKey(req.Job), b.aliveKey(req.Job, at)
		resp, err := b.c.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(rk), "=", 0), clientv3.Compare(clientv3.ModRevision(jk), "=", modRev(s.job))).
			Then(clientv3.OpPut(rk, rec.encode()), clientv3.OpPut(jk, j.encode()),
				clientv3.OpPut(ak, aliveValue(req.Owner, j.Counter), clientv3.WithLease(id))).
			Commit()
		if err != nil {
			used = true // may have been applied: a retry with this nonce finds it
			return backend.Grant{}, b.fail(err, "")
		}
		if resp.Succeeded {
			used = true
			return backend.Grant{Token: j.Counter, TTL: lf.got}, nil
		}
	}
}

func valueOf(kv *mvccpb.KeyValue) []byte {
	if kv == nil {
		return nil
	}
	return kv.Value
}

// heldRun checks that owner+token hold the running occurrence unexpired.
func (b *Backend) heldRun(s snapshot, job string, at time.Time, owner backend.Owner, token uint64) (runRec, error) {
	if s.run == nil || s.alive == nil || string(s.alive.Value) != aliveValue(owner, token) {
		return runRec{}, backend.ErrLeaseLost
	}
	r, err := decodeRun(s.run.Value)
	if err != nil {
		return r, err
	}
	if r.State != string(backend.Running) || r.owner() != owner || r.Token != token {
		return r, backend.ErrLeaseLost
	}
	return r, nil
}

// Heartbeat implements backend.Ledger: a keep-alive of the runner's lease.
// The lease's TTL is fixed at claim; req.TTL is validated, not applied.
func (b *Backend) Heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	return b.g.Heartbeat(ctx, req, b.heartbeat)
}

func (b *Backend) heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	job, at, owner, token := req.Job, req.ScheduledAt, req.Owner, req.Token
	s, err := b.read(ctx, job, at)
	if err != nil {
		return err
	}
	if _, err := b.heldRun(s, job, at, owner, token); err != nil {
		return err
	}
	if _, err := b.keepAlive(ctx, clientv3.LeaseID(s.alive.Lease)); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("%w: %s, token %d: the runner's lease expired", backend.ErrLeaseLost, occurrence(job, at), token)
		}
		return b.fail(err, "")
	}
	return nil
}

// Finish implements backend.Ledger.
func (b *Backend) Finish(ctx context.Context, req backend.FinishRequest) error {
	return b.g.Finish(ctx, req, b.finish)
}

func (b *Backend) finish(ctx context.Context, req backend.FinishRequest) error {
	job, at, owner, token, out := req.Job, req.ScheduledAt, req.Owner, req.Token, req.Outcome
	for {
		s, err := b.read(ctx, job, at)
		if err != nil {
			return err
		}
		r, err := b.heldRun(s, job, at, owner, token)
		if err != nil {
			return err
		}
		now := time.Now()
		r.State, r.Dur, r.Result, r.Error, r.Finished = string(out.State), int64(out.Duration), out.Result, out.Error, now.UnixNano()
		rk, ak := b.runKey(job, at), b.aliveKey(job, at)
		resp, err := b.c.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(rk), "=", s.run.ModRevision), clientv3.Compare(clientv3.ModRevision(ak), "=", s.alive.ModRevision)).
			Then(clientv3.OpPut(rk, r.encode()), clientv3.OpDelete(ak), clientv3.OpPut(b.finKey(now, job, at), "")).
			Commit()
		if err != nil {
			return b.fail(err, "")
		}
		if resp.Succeeded {
			b.revoke(clientv3.LeaseID(s.alive.Lease))
			return nil
		}
	}
}

// Reclaim implements backend.Ledger.
func (b *Backend) Reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	return b.g.Reclaim(ctx, req, b.reclaim)
}

func (b *Backend) reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	at := backend.Instant(req.ScheduledAt)
	lf := &leaseFor{b: b, ttl: req.TTL}
	used := false
	defer func() {
		if !used {
			lf.unused()
		}
	}()
	for {
		s, err := b.read(ctx, req.Job, at)
		if err != nil {
			return backend.Grant{}, backend.Run{}, err
		}
		if s.run == nil {
			return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: %s was never claimed", backend.ErrNotFound, occurrence(req.Job, at))
		}
		r, err := decodeRun(s.run.Value)
		if err != nil {
			return backend.Grant{}, backend.Run{}, err
		}
		switch {
		case r.State == string(backend.Running) && r.owner() == req.Owner:
			g, err := b.yours(ctx, s, r, req.Job, at)
			return g, r.view(s.alive != nil), err
		case backend.RunState(r.State).Finished():
			return backend.Grant{}, backend.Run{}, &backend.ClaimedError{Run: r.view(s.alive != nil)}
		case s.alive != nil:
			return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: %s held by %s", backend.ErrLeaseNotExpired, occurrence(req.Job, at), r.Instance)
		case req.MaxAttempts > 0 && r.Attempt >= req.MaxAttempts:
			// Attempts only grow, and the Txn below compares the run's
			// revision: the bound is judged on the record it replaces.
			return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: %s ran %d attempts, max %d",
				backend.ErrOccurrenceExhausted, occurrence(req.Job, at), r.Attempt, req.MaxAttempts)
		}
		if req.MaxRunning > 0 {
			// As in Claim: the job's live runner keys (this one's is gone);
			// the compare on the job record below fails, and the count is
			// taken again, if another claim or reclaim of the job came first.
			cr, err := b.c.Get(ctx, b.prefix+"a/"+escJob(req.Job)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithRev(s.rev))
			if err != nil {
				return backend.Grant{}, backend.Run{}, b.fail(err, "count running occurrences")
			}
			if int(cr.Count) >= req.MaxRunning {
				return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: reclaim %s: the job has %d other running, max %d",
					backend.ErrOccurrenceOverlap, occurrence(req.Job, at), cr.Count, req.MaxRunning)
			}
		}
		j, err := decodeJob(valueOf(s.job))
		if err != nil {
			return backend.Grant{}, backend.Run{}, err
		}
		id, err := lf.get(ctx)
		if err != nil {
			return backend.Grant{}, backend.Run{}, err
		}
		j.Counter++
		nr := newRun(req, j.Counter, r.Attempt+1, time.Now())
		rk, jk, ak := b.runKey(req.Job, at), b.jobKey(req.Job), b.aliveKey(req.Job, at)
		resp, err := b.c.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(rk), "=", s.run.ModRevision),
				clientv3.Compare(clientv3.ModRevision(jk), "=", modRev(s.job)),
				clientv3.Compare(clientv3.CreateRevision(ak), "=", 0)).
			Then(clientv3.OpPut(rk, nr.encode()), clientv3.OpPut(jk, j.encode()),
				clientv3.OpPut(ak, aliveValue(req.Owner, j.Counter), clientv3.WithLease(id))).
			Commit()
		if err != nil {
			used = true
			return backend.Grant{}, backend.Run{}, b.fail(err, "")
		}
		if resp.Succeeded {
			used = true
			return backend.Grant{Token: j.Counter, TTL: lf.got}, nr.view(true), nil
		}
	}
}

// Abandon implements backend.Ledger.
func (b *Backend) Abandon(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	return b.g.Abandon(ctx, job, at, b.abandon)
}

func (b *Backend) abandon(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	at = backend.Instant(at)
	for {
		s, err := b.read(ctx, job, at)
		if err != nil {
			return backend.Run{}, err
		}
		if s.run == nil {
			return backend.Run{}, fmt.Errorf("%w: %s was never claimed", backend.ErrNotFound, occurrence(job, at))
		}
		r, err := decodeRun(s.run.Value)
		if err != nil {
			return backend.Run{}, err
		}
		if backend.RunState(r.State).Finished() {
			return backend.Run{}, &backend.ClaimedError{Run: r.view(s.alive != nil)}
		}
		if s.alive != nil {
			return backend.Run{}, fmt.Errorf("%w: %s held by %s", backend.ErrLeaseNotExpired, occurrence(job, at), r.Instance)
		}
		now := time.Now()
		r.State, r.Finished = string(backend.Abandoned), now.UnixNano()
		rk, ak := b.runKey(job, at), b.aliveKey(job, at)
		resp, err := b.c.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(rk), "=", s.run.ModRevision), clientv3.Compare(clientv3.CreateRevision(ak), "=", 0)).
			Then(clientv3.OpPut(rk, r.encode()), clientv3.OpPut(b.finKey(now, job, at), "")).
			Commit()
		if err != nil {
			return backend.Run{}, b.fail(err, "")
		}
		if resp.Succeeded {
			return r.view(false), nil
		}
	}
}

// GetRun implements backend.Ledger.
func (b *Backend) GetRun(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	return b.g.GetRun(ctx, job, at, b.getRun)
}

func (b *Backend) getRun(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	s, err := b.read(ctx, job, at)
	if err != nil {
		return backend.Run{}, err
	}
	if s.run == nil {
		return backend.Run{}, backend.ErrNotFound
	}
	r, err := decodeRun(s.run.Value)
	if err != nil {
		return backend.Run{}, err
	}
	return r.view(s.alive != nil), nil
}

// HighWater implements backend.Ledger.
func (b *Backend) HighWater(ctx context.Context, job string) (time.Time, string, error) {
	return b.g.HighWater(ctx, job, b.highWater)
}

func (b *Backend) highWater(ctx context.Context, job string) (time.Time, string, error) {
	resp, err := b.c.Get(ctx, b.jobKey(job))
	if err != nil {
		return time.Time{}, "", b.fail(err, "")
	}
	if len(resp.Kvs) == 0 {
		return time.Time{}, "", nil
	}
	j, err := decodeJob(resp.Kvs[0].Value)
	if err != nil || j.High == 0 {
		return time.Time{}, "", err
	}
	return time.UnixMilli(j.High).UTC(), j.HighVersion, nil
}

// ListRuns implements backend.Ledger. With a job filter it reads that job's
// runs only, bounded by Since/Before in the key range.
func (b *Backend) ListRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	return b.g.ListRuns(ctx, f, b.listRuns)
}

func (b *Backend) listRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	runs, alive := b.prefix+"r/", b.prefix+"a/"
	if f.Job != "" {
		runs, alive = runs+escJob(f.Job)+"/", alive+escJob(f.Job)+"/"
	}
	resp, err := b.c.Txn(ctx).Then(
		clientv3.OpGet(runs, clientv3.WithPrefix()), clientv3.OpGet(alive, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return nil, b.fail(err, "")
	}
	live := map[string]bool{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		live[strings.TrimPrefix(string(kv.Key), b.prefix+"a/")] = true
	}
	var out []backend.Run
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		r, err := decodeRun(kv.Value)
		if err != nil {
			return nil, err
		}
		v := r.view(live[strings.TrimPrefix(string(kv.Key), b.prefix+"r/")])
		if f.Matches(v) {
			out = append(out, v)
		}
	}
	return f.Page(out), nil
}
