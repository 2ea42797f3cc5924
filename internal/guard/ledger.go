package guard

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// The run ledger's calls (backend.Ledger). A bare answer of a call about
// one occurrence is given the occurrence (backend.FormatOccurrence) and,
// where the call holds one, the token.

// Claim checks Claim's request and runs step.
func (g *Guard) Claim(ctx context.Context, req backend.ClaimRequest,
	step func(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error)) (backend.Grant, error) {
	if err := backend.CheckClaim(req, g.MinTTL); err != nil {
		return backend.Grant{}, err
	}
	if err := g.closed(); err != nil {
		return backend.Grant{}, err
	}
	gr, err := step(ctx, req)
	return gr, g.fail(err, call{op: "claim", subject: "job", name: req.Job, at: req.ScheduledAt})
}

// Reclaim checks Reclaim's request and runs step.
func (g *Guard) Reclaim(ctx context.Context, req backend.ClaimRequest,
	step func(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error)) (backend.Grant, backend.Run, error) {
	if err := backend.CheckClaim(req, g.MinTTL); err != nil {
		return backend.Grant{}, backend.Run{}, err
	}
	if err := g.closed(); err != nil {
		return backend.Grant{}, backend.Run{}, err
	}
	gr, r, err := step(ctx, req)
	return gr, r, g.fail(err, call{op: "reclaim", subject: "job", name: req.Job, at: req.ScheduledAt})
}

// Heartbeat checks Heartbeat's request and runs step.
func (g *Guard) Heartbeat(ctx context.Context, req backend.HeartbeatRequest,
	step func(ctx context.Context, req backend.HeartbeatRequest) error) error {
	if err := backend.CheckHeartbeat(req, g.MinTTL); err != nil {
		return err
	}
	if err := g.closed(); err != nil {
		return err
	}
	return g.fail(step(ctx, req), call{op: "heartbeat", subject: "job", name: req.Job, at: req.ScheduledAt, token: req.Token})
}

// Finish checks Finish's request, cleans its outcome's texts
// (backend.CheckFinish) and runs step with it.
func (g *Guard) Finish(ctx context.Context, req backend.FinishRequest,
	step func(ctx context.Context, req backend.FinishRequest) error) error {
	req, err := backend.CheckFinish(req)
	if err != nil {
		return err
	}
	if err := g.closed(); err != nil {
		return err
	}
	return g.fail(step(ctx, req), call{op: "finish", subject: "job", name: req.Job, at: req.ScheduledAt, token: req.Token})
}

// occurrence checks the arguments of a call about one occurrence that
// changes it.
func (g *Guard) occurrence(job string, at time.Time) error {
	if err := backend.CheckKey("job", job); err != nil {
		return err
	}
	if err := backend.CheckInstant(at); err != nil {
		return err
	}
	return g.closed()
}

// Abandon checks Abandon's arguments and runs step.
func (g *Guard) Abandon(ctx context.Context, job string, at time.Time,
	step func(ctx context.Context, job string, at time.Time) (backend.Run, error)) (backend.Run, error) {
	if err := g.occurrence(job, at); err != nil {
		return backend.Run{}, err
	}
	r, err := step(ctx, job, at)
	return r, g.fail(err, call{op: "abandon", subject: "job", name: job, at: at})
}

// GetRun checks GetRun's job and runs step.
func (g *Guard) GetRun(ctx context.Context, job string, at time.Time,
	step func(ctx context.Context, job string, at time.Time) (backend.Run, error)) (backend.Run, error) {
	if err := backend.CheckKey("job", job); err != nil {
		return backend.Run{}, err
	}
	if err := g.closed(); err != nil {
		return backend.Run{}, err
	}
	r, err := step(ctx, job, at)
	return r, g.fail(err, call{op: "get run", subject: "job", name: job, at: at})
}

// HighWater checks HighWater's argument and runs step.
func (g *Guard) HighWater(ctx context.Context, job string,
	step func(ctx context.Context, job string) (time.Time, string, error)) (time.Time, string, error) {
	if err := backend.CheckKey("job", job); err != nil {
		return time.Time{}, "", err
	}
	if err := g.closed(); err != nil {
		return time.Time{}, "", err
	}
	hw, ver, err := step(ctx, job)
	return hw, ver, g.fail(err, call{op: "high-water mark of", subject: "job", name: job})
}

// ListRuns checks f's job, if any, and runs step with f's limit made
// explicit (RunFilter.EffectiveLimit).
func (g *Guard) ListRuns(ctx context.Context, f backend.RunFilter,
	step func(ctx context.Context, f backend.RunFilter) ([]backend.Run, error)) ([]backend.Run, error) {
	if f.Job != "" {
		if err := backend.CheckKey("run filter job", f.Job); err != nil {
			return nil, err
		}
	}
	if err := g.closed(); err != nil {
		return nil, err
	}
	f.Limit = f.EffectiveLimit()
	runs, err := step(ctx, f)
	return runs, g.fail(err, call{op: "list"})
}

// Prune checks Prune's arguments and runs step.
func (g *Guard) Prune(ctx context.Context, olderThan time.Time, batch int,
	step func(ctx context.Context, olderThan time.Time, batch int) (int, error)) (int, error) {
	if err := backend.CheckPrune(olderThan, batch); err != nil {
		return 0, err
	}
	if err := g.closed(); err != nil {
		return 0, err
	}
	n, err := step(ctx, olderThan, batch)
	return n, g.fail(err, call{op: "prune"})
}
