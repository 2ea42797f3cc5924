package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/backend"
)

func (b *Backend) jobLocked(name string) *job {
	j := b.jobs[name]
	if j == nil {
		j = &job{}
		b.jobs[name] = j
	}
	return j
}

func (b *Backend) view(r *run, now time.Time) backend.Run {
	rec := r.rec
	rec.Expired = rec.State == backend.Running && !now.Before(r.expires)
	return rec
}

func (b *Backend) runningLocked(jobName string, now time.Time) int {
	n := 0
	for k, r := range b.runs {
		if k.job == jobName && r.rec.State == backend.Running && now.Before(r.expires) {
			n++
		}
	}
	return n
}

// Claim implements backend.Ledger.
func (b *Backend) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	return b.g.Claim(ctx, req, b.claim)
}

func (b *Backend) claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	if ctx.Err() != nil {
		return backend.Grant{}, backend.NotSent(ctx)
	}
	if err := b.lock(); err != nil {
		return backend.Grant{}, err
	}
	defer b.mu.Unlock()
	at := backend.Instant(req.ScheduledAt)
	now := b.now()
	k := runKey{req.Job, at.UnixMilli()}
	if r := b.runs[k]; r != nil {
		if r.rec.Owner == req.Owner && r.rec.State == backend.Running { // a retry: renew it
			r.expires = now.Add(req.TTL)
			return backend.Grant{Token: r.rec.Token, TTL: req.TTL}, nil
		}
		return backend.Grant{}, &backend.ClaimedError{Run: b.view(r, now)}
	}
	if at.After(now.Add(req.MaxEarly)) {
		return backend.Grant{}, fmt.Errorf("%w: job %q at %s, backend clock %s, max early %v",
			backend.ErrOccurrenceTooEarly, req.Job, at.Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano), req.MaxEarly)
	}
	if req.MaxLate > 0 && at.Before(now.Add(-req.MaxLate)) {
		return backend.Grant{}, fmt.Errorf("%w: job %q at %s, backend clock %s, max late %v",
			backend.ErrOccurrenceTooLate, req.Job, at.Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano), req.MaxLate)
	}
	if req.MaxRunning > 0 {
		if n := b.runningLocked(req.Job, now); n >= req.MaxRunning {
			return backend.Grant{}, fmt.Errorf("%w: job %q has %d running, max %d", backend.ErrOccurrenceOverlap, req.Job, n, req.MaxRunning)
		}
	}
	j := b.jobLocked(req.Job)
	j.counter++
	if at.After(j.high) {
		j.high, j.highVersion = at, req.SpecVersion
	}
	b.runs[k] = &run{
		rec: backend.Run{
			Job: req.Job, ScheduledAt: at, SpecVersion: req.SpecVersion, Owner: req.Owner,
			Token: j.counter, Attempt: 1, State: backend.Running, ClaimedAt: now.UTC().Round(0),
		},
		expires: now.Add(req.TTL),
	}
	return backend.Grant{Token: j.counter, TTL: req.TTL}, nil
}

// held returns the running occurrence held by owner+token, or ErrLeaseLost.
func (b *Backend) held(job string, at time.Time, owner backend.Owner, token uint64, now time.Time) (*run, error) {
	r := b.runs[runKey{job, backend.Instant(at).UnixMilli()}]
	if r == nil || r.rec.State != backend.Running || r.rec.Owner != owner || r.rec.Token != token || !now.Before(r.expires) {
		return nil, backend.ErrLeaseLost
	}
	return r, nil
}

// Heartbeat implements backend.Ledger.
func (b *Backend) Heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	return b.g.Heartbeat(ctx, req, b.heartbeat)
}

func (b *Backend) heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	job, at, owner, token, ttl := req.Job, req.ScheduledAt, req.Owner, req.Token, req.TTL
	if ctx.Err() != nil {
		return backend.NotSent(ctx)
	}
	if err := b.lock(); err != nil {
		return err
	}
	defer b.mu.Unlock()
	now := b.now()
	r, err := b.held(job, at, owner, token, now)
	if err != nil {
		return err
	}
	r.expires = now.Add(ttl)
	return nil
}

// Finish implements backend.Ledger.
func (b *Backend) Finish(ctx context.Context, req backend.FinishRequest) error {
	return b.g.Finish(ctx, req, b.finish)
}

func (b *Backend) finish(ctx context.Context, req backend.FinishRequest) error {
	job, at, owner, token, out := req.Job, req.ScheduledAt, req.Owner, req.Token, req.Outcome
	if ctx.Err() != nil {
		return backend.NotSent(ctx)
	}
	if err := b.lock(); err != nil {
		return err
	}
	defer b.mu.Unlock()
	now := b.now()
	r, err := b.held(job, at, owner, token, now)
	if err != nil {
		return err
	}
	r.rec.State, r.rec.Duration, r.rec.Result, r.rec.Error = out.State, out.Duration, out.Result, out.Error
	r.rec.FinishedAt = now.UTC().Round(0)
	return nil
}

// Reclaim implements backend.Ledger.
func (b *Backend) Reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	return b.g.Reclaim(ctx, req, b.reclaim)
}

func (b *Backend) reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	if ctx.Err() != nil {
		return backend.Grant{}, backend.Run{}, backend.NotSent(ctx)
	}
	if err := b.lock(); err != nil {
		return backend.Grant{}, backend.Run{}, err
	}
	defer b.mu.Unlock()
	at := backend.Instant(req.ScheduledAt)
	now := b.now()
	r := b.runs[runKey{req.Job, at.UnixMilli()}]
	switch {
	case r == nil:
		return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: job %q at %s was never claimed", backend.ErrNotFound, req.Job, at.Format(time.RFC3339Nano))
	case r.rec.State == backend.Running && r.rec.Owner == req.Owner: // a retry: renew it
		r.expires = now.Add(req.TTL)
		return backend.Grant{Token: r.rec.Token, TTL: req.TTL}, b.view(r, now), nil
	case r.rec.State.Finished():
		return backend.Grant{}, backend.Run{}, &backend.ClaimedError{Run: b.view(r, now)}
	case now.Before(r.expires):
		return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: job %q at %s held by %s", backend.ErrLeaseNotExpired, req.Job, at.Format(time.RFC3339Nano), r.rec.Owner.Instance)
	case req.MaxAttempts > 0 && r.rec.Attempt >= req.MaxAttempts:
		return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: job %q at %s ran %d attempts, max %d",
			backend.ErrOccurrenceExhausted, req.Job, at.Format(time.RFC3339Nano), r.rec.Attempt, req.MaxAttempts)
	}
	if req.MaxRunning > 0 { // r's lease expired: it does not count itself
		if n := b.runningLocked(req.Job, now); n >= req.MaxRunning {
			return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: reclaim of job %q at %s: the job has %d other running, max %d",
				backend.ErrOccurrenceOverlap, req.Job, at.Format(time.RFC3339Nano), n, req.MaxRunning)
		}
	}
	j := b.jobLocked(req.Job)
	j.counter++
	r.rec.Owner, r.rec.Token, r.rec.Attempt = req.Owner, j.counter, r.rec.Attempt+1
	r.rec.SpecVersion, r.rec.ClaimedAt = req.SpecVersion, now.UTC().Round(0)
	r.expires = now.Add(req.TTL)
	return backend.Grant{Token: j.counter, TTL: req.TTL}, b.view(r, now), nil
}

// Abandon implements backend.Ledger.
func (b *Backend) Abandon(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	return b.g.Abandon(ctx, job, at, b.abandon)
}

func (b *Backend) abandon(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	if ctx.Err() != nil {
		return backend.Run{}, backend.NotSent(ctx)
	}
	if err := b.lock(); err != nil {
		return backend.Run{}, err
	}
	defer b.mu.Unlock()
	now := b.now()
	at = backend.Instant(at)
	r := b.runs[runKey{job, at.UnixMilli()}]
	switch {
	case r == nil:
		return backend.Run{}, fmt.Errorf("%w: job %q at %s was never claimed", backend.ErrNotFound, job, at.Format(time.RFC3339Nano))
	case r.rec.State.Finished():
		return backend.Run{}, &backend.ClaimedError{Run: b.view(r, now)}
	case now.Before(r.expires):
		return backend.Run{}, fmt.Errorf("%w: job %q at %s held by %s", backend.ErrLeaseNotExpired, job, at.Format(time.RFC3339Nano), r.rec.Owner.Instance)
	}
	r.rec.State, r.rec.FinishedAt = backend.Abandoned, now.UTC().Round(0)
	return b.view(r, now), nil
}

// GetRun implements backend.Ledger.
func (b *Backend) GetRun(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	return b.g.GetRun(ctx, job, at, b.getRun)
}

func (b *Backend) getRun(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	if err := b.lock(); err != nil {
		return backend.Run{}, err
	}
	defer b.mu.Unlock()
	r := b.runs[runKey{job, backend.Instant(at).UnixMilli()}]
	if r == nil {
		return backend.Run{}, backend.ErrNotFound
	}
	return b.view(r, b.now()), nil
}

// HighWater implements backend.Ledger.
func (b *Backend) HighWater(ctx context.Context, job string) (time.Time, string, error) {
	return b.g.HighWater(ctx, job, b.highWater)
}

func (b *Backend) highWater(ctx context.Context, job string) (time.Time, string, error) {
	if err := b.lock(); err != nil {
		return time.Time{}, "", err
	}
	defer b.mu.Unlock()
	if j := b.jobs[job]; j != nil {
		return j.high, j.highVersion, nil
	}
	return time.Time{}, "", nil
}

// ListRuns implements backend.Ledger.
func (b *Backend) ListRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	return b.g.ListRuns(ctx, f, b.listRuns)
}

func (b *Backend) listRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	if err := b.lock(); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	now := b.now()
	var out []backend.Run
	for _, r := range b.runs {
		if f.Matches(r.rec) {
			out = append(out, b.view(r, now))
		}
	}
	return f.Page(out), nil
}

// Prune implements backend.Ledger.
func (b *Backend) Prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	return b.g.Prune(ctx, olderThan, batch, b.prune)
}

func (b *Backend) prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	if err := b.lock(); err != nil {
		return 0, err
	}
	defer b.mu.Unlock()
	n := 0
	for k, r := range b.runs {
		if n == batch {
			break
		}
		if r.rec.State.Finished() && r.rec.FinishedAt.Before(olderThan) {
			delete(b.runs, k)
			n++
		}
	}
	return n, nil
}
