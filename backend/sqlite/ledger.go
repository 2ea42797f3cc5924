package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/sqlledger"
)

// runRow is one row of the runs table.
type runRow struct {
	rec     backend.Run
	expires int64 // runner's lease, CLOCK_BOOTTIME ns
	bootID  string
}

// runCols are the columns scanRun reads, in order.
const runCols = `job, scheduled_ms, spec_version, instance, nonce, token, attempt, state,
	claimed_at_ms, finished_at_ms, duration_ns, result, error, expires_ns, boot_id`

func scanRun(s scanner) (*runRow, error) {
	var r runRow
	var at, claimed, token, dur int64
	var finished sql.NullInt64
	var nonce []byte
	var state string
	if err := s.Scan(&r.rec.Job, &at, &r.rec.SpecVersion, &r.rec.Owner.Instance, &nonce, &token,
		&r.rec.Attempt, &state, &claimed, &finished, &dur, &r.rec.Result, &r.rec.Error, &r.expires, &r.bootID); err != nil {
		return nil, err
	}
	if err := sqlledger.SetNonce(&r.rec.Owner.Nonce, nonce); err != nil {
		return nil, err
	}
	r.rec.ScheduledAt = fromMs(at)
	r.rec.Token = uint64(token)
	r.rec.State = backend.RunState(state)
	r.rec.ClaimedAt = fromMs(claimed)
	if finished.Valid {
		r.rec.FinishedAt = fromMs(finished.Int64)
	}
	r.rec.Duration = time.Duration(dur)
	return &r, nil
}

// liveRun reports whether the runner's lease is unexpired at now during this
// boot.
func (b *Backend) liveRun(r *runRow, now int64) bool {
	return r.bootID == b.bootID && r.expires > now
}

// view returns the record as callers see it, with Expired computed.
func (b *Backend) view(r *runRow, now int64) backend.Run {
	rec := r.rec
	rec.Expired = rec.State == backend.Running && !b.liveRun(r, now)
	return rec
}

// queryer is *sql.DB or *sql.Tx.
type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// getRun reads the occurrence's row with what Go judges expiry by (the
// shared sqlledger.Ledger.Get reads the record as callers see it).
func getRun(ctx context.Context, q queryer, job string, atMs int64) (*runRow, error) {
	return scanRun(q.QueryRowContext(ctx, `SELECT `+runCols+` FROM runs WHERE job = ? AND scheduled_ms = ?`, job, atMs))
}

// Claim implements backend.Ledger.
func (b *Backend) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	return b.g.Claim(ctx, req, b.claim)
}

func (b *Backend) claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	at := backend.Instant(req.ScheduledAt)
	var g backend.Grant
	err := b.write(ctx, func(tx *sql.Tx) error {
		now, err := b.now()
		if err != nil {
			return err
		}
		wall := b.wall()
		r, err := getRun(ctx, tx, req.Job, at.UnixMilli())
		switch {
		case err == nil:
			if renew, err := sqlledger.Existing(req, b.view(r, now)); !renew {
				return err
			}
			// A retry: renew it.
			if err := b.renewRun(ctx, tx, req, at, now); err != nil {
				return stepErr(ctx, err)
			}
			g = backend.Grant{Token: r.rec.Token, TTL: req.TTL}
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return stepErr(ctx, err)
		}
		if err := sqlledger.Window(req, at, wall); err != nil {
			return err
		}
		if req.MaxRunning > 0 {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM runs
				WHERE job = ? AND state = 'running' AND boot_id = ? AND expires_ns > ?`,
				req.Job, b.bootID, now).Scan(&n); err != nil {
				return stepErr(ctx, err)
			}
			if n >= req.MaxRunning {
				return sqlledger.Overlap(req, n)
			}
		}
		// The per-job counter and the high-water mark, in one statement.
		// (SET expressions see the row's values before the update.)
		var token int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO jobs (job, counter, high_ms, high_version) VALUES (?, 1, ?, ?)
			ON CONFLICT (job) DO UPDATE SET counter = counter + 1,
				high_version = CASE WHEN high_ms IS NULL OR excluded.high_ms > high_ms THEN excluded.high_version ELSE high_version END,
				high_ms = CASE WHEN high_ms IS NULL OR excluded.high_ms > high_ms THEN excluded.high_ms ELSE high_ms END
			RETURNING counter`, req.Job, at.UnixMilli(), req.SpecVersion).Scan(&token); err != nil {
			return stepErr(ctx, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO runs (job, scheduled_ms, spec_version, instance, nonce, token,
			attempt, state, claimed_at_ms, expires_ns, boot_id) VALUES (?, ?, ?, ?, ?, ?, 1, 'running', ?, ?, ?)`,
			req.Job, at.UnixMilli(), req.SpecVersion, req.Owner.Instance, req.Owner.Nonce[:], token,
			wall.UnixMilli(), now+int64(req.TTL), b.bootID); err != nil {
			return stepErr(ctx, err)
		}
		g = backend.Grant{Token: uint64(token), TTL: req.TTL}
		return nil
	})
	if err != nil {
		return backend.Grant{}, err
	}
	return g, nil
}

// runGuard is the WHERE clause of Heartbeat and Finish: the occurrence is
// running, held by owner+token, and its lease is live during this boot.
// Arguments: job, scheduled ms, instance, nonce, token, boot id, now.
const runGuard = `job = ? AND scheduled_ms = ? AND state = 'running' AND instance = ? AND nonce = ?
	AND token = ? AND boot_id = ? AND expires_ns > ?`

// Heartbeat implements backend.Ledger.
func (b *Backend) Heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	return b.g.Heartbeat(ctx, req, b.heartbeat)
}

func (b *Backend) heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	job, at, owner, token, ttl := req.Job, req.ScheduledAt, req.Owner, req.Token, req.TTL
	at = backend.Instant(at)
	return b.write(ctx, func(tx *sql.Tx) error {
		now, err := b.now()
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE runs SET expires_ns = ? WHERE `+runGuard,
			now+int64(ttl), job, at.UnixMilli(), owner.Instance, owner.Nonce[:], int64(token), b.bootID, now)
		return b.guarded(ctx, res, err)
	})
}

// Finish implements backend.Ledger.
func (b *Backend) Finish(ctx context.Context, req backend.FinishRequest) error {
	return b.g.Finish(ctx, req, b.finish)
}

func (b *Backend) finish(ctx context.Context, req backend.FinishRequest) error {
	job, at, owner, token, out := req.Job, req.ScheduledAt, req.Owner, req.Token, req.Outcome
	at = backend.Instant(at)
	return b.write(ctx, func(tx *sql.Tx) error {
		now, err := b.now()
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE runs SET state = ?, finished_at_ms = ?, duration_ns = ?, result = ?, error = ?
			WHERE `+runGuard,
			string(out.State), b.wall().UnixMilli(), int64(out.Duration), out.Result, out.Error,
			job, at.UnixMilli(), owner.Instance, owner.Nonce[:], int64(token), b.bootID, now)
		return b.guarded(ctx, res, err)
	})
}

// Reclaim implements backend.Ledger.
func (b *Backend) Reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	return b.g.Reclaim(ctx, req, b.reclaim)
}

func (b *Backend) reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	at := backend.Instant(req.ScheduledAt)
	var g backend.Grant
	var run backend.Run
	err := b.write(ctx, func(tx *sql.Tx) error {
		now, err := b.now()
		if err != nil {
			return err
		}
		r, err := getRun(ctx, tx, req.Job, at.UnixMilli())
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return sqlledger.NeverClaimed(req.Job, at)
		case err != nil:
			return stepErr(ctx, err)
		}
		if renew, err := sqlledger.Reclaim(req, at, b.view(r, now), b.liveRun(r, now)); err != nil {
			return err
		} else if renew { // a retry
			if err := b.renewRun(ctx, tx, req, at, now); err != nil {
				return stepErr(ctx, err)
			}
			g, run = backend.Grant{Token: r.rec.Token, TTL: req.TTL}, b.view(r, now)
			return nil
		}
		if req.MaxRunning > 0 { // the job's other occurrences under live leases (this one's expired)
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM runs
				WHERE job = ? AND scheduled_ms <> ? AND state = 'running' AND boot_id = ? AND expires_ns > ?`,
				req.Job, at.UnixMilli(), b.bootID, now).Scan(&n); err != nil {
				return stepErr(ctx, err)
			}
			if n >= req.MaxRunning {
				return sqlledger.OverlapOther(req, at, n)
			}
		}
		var token int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO jobs (job, counter) VALUES (?, 1)
			ON CONFLICT (job) DO UPDATE SET counter = counter + 1 RETURNING counter`, req.Job).Scan(&token); err != nil {
			return stepErr(ctx, err)
		}
		wall := b.wall()
		r.rec.Owner, r.rec.Token, r.rec.Attempt = req.Owner, uint64(token), r.rec.Attempt+1
		r.rec.SpecVersion, r.rec.ClaimedAt = req.SpecVersion, fromMs(wall.UnixMilli())
		r.expires, r.bootID = now+int64(req.TTL), b.bootID
		if _, err := tx.ExecContext(ctx, `UPDATE runs SET instance = ?, nonce = ?, token = ?, attempt = ?,
			spec_version = ?, claimed_at_ms = ?, expires_ns = ?, boot_id = ? WHERE job = ? AND scheduled_ms = ?`,
			req.Owner.Instance, req.Owner.Nonce[:], token, r.rec.Attempt, req.SpecVersion, wall.UnixMilli(),
			r.expires, r.bootID, req.Job, at.UnixMilli()); err != nil {
			return stepErr(ctx, err)
		}
		g, run = backend.Grant{Token: uint64(token), TTL: req.TTL}, b.view(r, now)
		return nil
	})
	if err != nil {
		return backend.Grant{}, backend.Run{}, err
	}
	return g, run, nil
}

// Abandon implements backend.Ledger.
func (b *Backend) Abandon(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	return b.g.Abandon(ctx, job, at, b.abandon)
}

func (b *Backend) abandon(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	at = backend.Instant(at)
	var run backend.Run
	err := b.write(ctx, func(tx *sql.Tx) error {
		now, err := b.now()
		if err != nil {
			return err
		}
		r, err := getRun(ctx, tx, job, at.UnixMilli())
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return sqlledger.NeverClaimed(job, at)
		case err != nil:
			return stepErr(ctx, err)
		}
		if err := sqlledger.Abandon(job, at, b.view(r, now), b.liveRun(r, now)); err != nil {
			return err
		}
		finished := b.wall().UnixMilli()
		if _, err := tx.ExecContext(ctx, `UPDATE runs SET state = 'abandoned', finished_at_ms = ? WHERE job = ? AND scheduled_ms = ?`,
			finished, job, at.UnixMilli()); err != nil {
			return stepErr(ctx, err)
		}
		r.rec.State, r.rec.FinishedAt = backend.Abandoned, fromMs(finished)
		run = b.view(r, now)
		return nil
	})
	if err != nil {
		return backend.Run{}, err
	}
	return run, nil
}

// GetRun implements backend.Ledger (sqlledger; Expired judged by the
// host's clock, see newLedger).
func (b *Backend) GetRun(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	return b.g.GetRun(ctx, job, at, b.led.GetRun)
}

// HighWater implements backend.Ledger (sqlledger).
func (b *Backend) HighWater(ctx context.Context, job string) (time.Time, string, error) {
	return b.g.HighWater(ctx, job, b.led.HighWater)
}

// ListRuns implements backend.Ledger (sqlledger): newest ScheduledAt
// first, then by job.
func (b *Backend) ListRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	return b.g.ListRuns(ctx, f, b.led.ListRuns)
}

// Prune implements backend.Ledger (sqlledger, with newLedger's PruneSQL):
// it deletes at most batch finished runs whose FinishedAt is before
// olderThan. Running occurrences, counters and high-water marks are never
// touched.
func (b *Backend) Prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	return b.g.Prune(ctx, olderThan, batch, b.led.Prune)
}

// renewRun extends the runner's lease on a running occurrence to the TTL
// from now, for a retried Claim or Reclaim answered "yours".
func (b *Backend) renewRun(ctx context.Context, tx *sql.Tx, req backend.ClaimRequest, at time.Time, now int64) error {
	_, err := tx.ExecContext(ctx, `UPDATE runs SET expires_ns = ?, boot_id = ? WHERE job = ? AND scheduled_ms = ?`,
		now+int64(req.TTL), b.bootID, req.Job, at.UnixMilli())
	return err
}
