package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/sqlledger"
)

// getRun reads the occurrence's record through q (the pool, or a
// transaction with lock " FOR UPDATE").
func (b *Backend) getRun(ctx context.Context, q pgxQuerier, job string, at time.Time, lock string) (backend.Run, error) {
	return b.led.Get(ctx, pgxDB{q}, b.led.D.ScanRun, job, at, lock)
}

// occurrence names an occurrence in messages.
var occurrence = backend.FormatOccurrence

// tooLate returns sqlledger.TooLate when MaxLate bounds the claim and at is
// earlier than the server's clock now minus MaxLate. Claim judges it in the
// order of the other backends — the occurrence's record, MaxEarly,
// MaxLate, MaxRunning — inside the transaction that the error rolls back:
// a claim of an existing occurrence (a retry by the same nonce, or another
// owner) is answered from its record. Without MaxRunning it is judged after
// the INSERT took the occurrence's key, so that holds even when the
// record's transaction was still in flight (the INSERT waited for it).
func tooLate(req backend.ClaimRequest, at, now time.Time) error {
	if !sqlledger.Late(req, at, now) {
		return nil
	}
	return sqlledger.TooLate(req, at, now)
}

// claimSQL claims an occurrence in one statement: it bumps the job's
// counter and raises its high-water mark (which locks the job's row, so the
// claims of one job are serialised), then inserts the run with ON CONFLICT
// DO NOTHING; the primary key (job, scheduled_at) is the guarantee. The job
// row is touched only when the occurrence is not in the future beyond
// MaxEarly by the server's clock, and not already in the statement's
// snapshot: a scheduler that comes late to a claimed occurrence writes
// nothing (without that check every losing attempt bumped the counter, and
// all attempts of a job queued on its row for one WAL flush each). The
// result says which happened.
func (b *Backend) claimSQL() string {
	return `WITH j AS (
		INSERT INTO ` + b.tJobs + ` AS j (job, counter, high_at, high_version)
		SELECT $1, 1, $2, $3 WHERE $2 <= clock_timestamp() + $7 * interval '1 microsecond'
			AND NOT EXISTS (SELECT 1 FROM ` + b.tRuns + ` WHERE job = $1 AND scheduled_at = $2)
		ON CONFLICT (job) DO UPDATE SET counter = j.counter + 1,
			high_version = CASE WHEN j.high_at IS NULL OR excluded.high_at > j.high_at THEN excluded.high_version ELSE j.high_version END,
			high_at = GREATEST(j.high_at, excluded.high_at)
		RETURNING counter
	), r AS (
		INSERT INTO ` + b.tRuns + ` (job, scheduled_at, spec_version, instance, nonce, token, attempt, state, claimed_at, expires_at)
		SELECT $1, $2, $3, $4, $5, counter, 1, 'running', clock_timestamp(), clock_timestamp() + $6 * interval '1 microsecond' FROM j
		ON CONFLICT (job, scheduled_at) DO NOTHING
		RETURNING token
	)
	SELECT (SELECT count(*) FROM j), (SELECT token FROM r), clock_timestamp()`
}

// Claim implements backend.Ledger. Without MaxRunning it is a transaction
// of two statements (claimInsertFirst);
// with it, a transaction that locks the job's row before counting the
// running occurrences, so that two claims cannot both see room.
func (b *Backend) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	return b.g.Claim(ctx, req, b.claim)
}

func (b *Backend) claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	if err := b.gate.Enter(); err != nil {
		return backend.Grant{}, err
	}
	defer b.gate.Leave()
	at := backend.Instant(req.ScheduledAt)
	for attempt := 0; attempt < 10; attempt++ {
		var (
			bumped int
			token  *int64
			now    time.Time
			err    error
		)
		if req.MaxRunning > 0 {
			bumped, token, now, err = b.claimLimited(ctx, req, at)
		} else {
			bumped, token, now, err = b.claimInsertFirst(ctx, req, at)
		}
		if sqlledger.Verdict(err) { // TooLate
			return backend.Grant{}, err
		}
		if err != nil {
			return backend.Grant{}, stepErr(ctx, err)
		}
		if token != nil {
			return backend.Grant{Token: uint64(*token), TTL: sqlledger.MicrosTTL(req.TTL)}, nil
		}
		// Not inserted: the occurrence exists, or it is too early, or (with
		// MaxRunning) the job is at its limit.
		r, err := b.getRun(ctx, b.pool, req.Job, at, "")
		switch {
		case err == nil:
			if renew, err := sqlledger.Existing(req, r); !renew {
				return backend.Grant{}, err
			}
			// A retry: renew it.
			n, err := b.led.Renew(ctx, b.led.DB, req, at, r.Token)
			if err != nil {
				return backend.Grant{}, stepErr(ctx, err)
			}
			if n == 0 {
				continue // taken over meanwhile: read it again
			}
			return backend.Grant{Token: r.Token, TTL: sqlledger.MicrosTTL(req.TTL)}, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return backend.Grant{}, stepErr(ctx, err)
		}
		if bumped == 0 {
			return backend.Grant{}, sqlledger.TooEarly(req, at, now)
		}
		if bumped < 0 {
			return backend.Grant{}, sqlledger.Overlap(req, -bumped)
		}
		// The conflicting run vanished (pruned after finishing): try again,
		// and be told it is finished or claim it.
	}
	return backend.Grant{}, errors.New("no answer after 10 attempts under contention")
}

// claimInsertFirst is Claim without MaxRunning, in a transaction that
// first INSERTs the run with token 0 (ON CONFLICT DO NOTHING: a claim that
// loses waits on the winner's row, then writes nothing and commits
// nothing), and only then bumps the job's counter (locking the job's row)
// and sets the run's token. Claims that bumped the counter first queued
// every concurrent loser on the job's row for a WAL flush of its own.
// Results as claimSQL's: bumped = 1 unless it is too early, token nil when
// the occurrence exists; an ErrOccurrenceTooLate error (rolled back) when it was
// inserted but is too late.
func (b *Backend) claimInsertFirst(ctx context.Context, req backend.ClaimRequest, at time.Time) (int, *int64, time.Time, error) {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return 0, nil, time.Time{}, err
	}
	defer tx.Rollback(ctx)
	var (
		inserted, due bool
		now           time.Time
	)
	if err := tx.QueryRow(ctx, `WITH r AS (
			INSERT INTO `+b.tRuns+` (job, scheduled_at, spec_version, instance, nonce, token, attempt, state, claimed_at, expires_at)
			SELECT $1, $2, $3, $4, $5, 0, 1, 'running', clock_timestamp(), clock_timestamp() + $6 * interval '1 microsecond'
			WHERE $2 <= clock_timestamp() + $7 * interval '1 microsecond'
			ON CONFLICT (job, scheduled_at) DO NOTHING
			RETURNING 1
		) SELECT EXISTS (SELECT 1 FROM r), $2 <= clock_timestamp() + $7 * interval '1 microsecond', clock_timestamp()`,
		req.Job, at, req.SpecVersion, req.Owner.Instance, req.Owner.Nonce[:], sqlledger.Micros(req.TTL), sqlledger.Micros(req.MaxEarly)).
		Scan(&inserted, &due, &now); err != nil {
		return 0, nil, now, err
	}
	if !inserted {
		// Too early, or claimed by another (committed, or rolled back
		// after this statement waited: the caller reads it again).
		if due {
			return 1, nil, now, nil
		}
		return 0, nil, now, nil
	}
	if err := tooLate(req, at, now); err != nil {
		return 0, nil, now, err
	}
	var token int64
	if err := tx.QueryRow(ctx, `WITH j AS (
			INSERT INTO `+b.tJobs+` AS j (job, counter, high_at, high_version) VALUES ($1, 1, $2, $3)
			ON CONFLICT (job) DO UPDATE SET counter = j.counter + 1,
				high_version = CASE WHEN j.high_at IS NULL OR excluded.high_at > j.high_at THEN excluded.high_version ELSE j.high_version END,
				high_at = GREATEST(j.high_at, excluded.high_at)
			RETURNING counter
		) UPDATE `+b.tRuns+` SET token = (SELECT counter FROM j) WHERE job = $1 AND scheduled_at = $2 RETURNING token`,
		req.Job, at, req.SpecVersion).Scan(&token); err != nil {
		return 0, nil, now, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, nil, now, err
	}
	return 1, &token, now, nil
}

// claimLimited is Claim with MaxRunning: it returns bumped = 1 and the
// token when the run was inserted; bumped = 0 when it is too early; an
// ErrOccurrenceTooLate error when it is too late;
// bumped = -running when the job is at its limit; token nil when the
// occurrence exists.
func (b *Backend) claimLimited(ctx context.Context, req backend.ClaimRequest, at time.Time) (int, *int64, time.Time, error) {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return 0, nil, time.Time{}, err
	}
	defer tx.Rollback(ctx)
	var (
		exists, early bool
		now           time.Time
	)
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+b.tRuns+` WHERE job = $1 AND scheduled_at = $2),
		$2 > clock_timestamp() + $3 * interval '1 microsecond', clock_timestamp()`,
		req.Job, at, sqlledger.Micros(req.MaxEarly)).Scan(&exists, &early, &now); err != nil {
		return 0, nil, now, err
	}
	if exists {
		return 1, nil, now, nil
	}
	if early {
		return 0, nil, now, nil
	}
	if err := tooLate(req, at, now); err != nil {
		return 0, nil, now, err
	}
	// Lock the job's row (creating it), so that claims of this job queue
	// here; the count below then sees every claim committed before.
	if _, err := tx.Exec(ctx, `INSERT INTO `+b.tJobs+` (job, counter) VALUES ($1, 0)
		ON CONFLICT (job) DO UPDATE SET counter = `+b.tJobs+`.counter`, req.Job); err != nil {
		return 0, nil, now, err
	}
	var running int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+b.tRuns+`
		WHERE job = $1 AND state = 'running' AND expires_at > clock_timestamp()`, req.Job).Scan(&running); err != nil {
		return 0, nil, now, err
	}
	if running >= req.MaxRunning {
		return -running, nil, now, nil
	}
	var bumped int
	var token *int64
	if err := tx.QueryRow(ctx, b.claimSQL(), req.Job, at, req.SpecVersion, req.Owner.Instance, req.Owner.Nonce[:],
		sqlledger.Micros(req.TTL), sqlledger.Micros(req.MaxEarly)).Scan(&bumped, &token, &now); err != nil {
		return 0, nil, now, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, nil, now, err
	}
	return bumped, token, now, nil
}

// Heartbeat implements backend.Ledger (sqlledger: a guarded UPDATE).
func (b *Backend) Heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	return b.g.Heartbeat(ctx, req, b.led.Heartbeat)
}

// Finish implements backend.Ledger (sqlledger: a guarded UPDATE).
func (b *Backend) Finish(ctx context.Context, req backend.FinishRequest) error {
	return b.g.Finish(ctx, req, b.led.Finish)
}
