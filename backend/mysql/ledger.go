package mysql

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/sqlledger"
)

// getRun reads the occurrence's record through q (the pool, or a
// transaction with lock " FOR UPDATE").
func (b *Backend) getRun(ctx context.Context, q sqlledger.StdQueryer, job string, at time.Time, lock string) (backend.Run, error) {
	return b.led.Get(ctx, sqlledger.Std{Q: q}, b.led.D.ScanRun, job, at, lock)
}

// tx runs fn in a READ COMMITTED transaction, retrying deadlocks.
func (b *Backend) tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return retryDeadlock(ctx, func() error {
		tx, err := b.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}

// bumpSQL takes the next token of a job (locking its row, so the claims of
// one job are serialised) and raises the high-water mark. high_version is
// assigned before high_at because ODKU assigns left to right: its IF must
// see the old high_at.
func (b *Backend) bumpSQL() string {
	const higher = `(high_at IS NULL OR VALUES(high_at) > high_at)`
	return `INSERT INTO ` + b.tJobs + ` (job, counter, high_at, high_version) VALUES (?, LAST_INSERT_ID(1), ?, ?)
		ON DUPLICATE KEY UPDATE counter = LAST_INSERT_ID(counter + 1),
			high_version = IF(` + higher + `, VALUES(high_version), high_version),
			high_at = IF(` + higher + `, VALUES(high_at), high_at)`
}

// errLostRace: the run's INSERT hit the primary key (1062).
var errLostRace = errors.New("lost the race")

// Claim implements backend.Ledger: read the occurrence's record (one
// autocommit read: a claim that loses to a committed winner costs one round
// trip); without one, in one READ COMMITTED transaction (claimTx), INSERT
// the run (token 0 for now) unless it is in the future beyond MaxEarly by
// the server's clock; take the job's next token (which locks the job's row,
// so the claims of one job are serialised); set the run's token unless it
// is older than MaxLate by that clock (refused, rolled back); count running
// occurrences when MaxRunning is set. A duplicate-key error on the INSERT
// means another claim won. Inserting first makes a losing claim wait on the
// winner's row and fail without locking the job's row or writing anything
// (it used to bump the counter first, so every concurrent loser queued on
// the job's row for a redo-log flush of its own).
func (b *Backend) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	return b.g.Claim(ctx, req, b.claim)
}

func (b *Backend) claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	if err := b.gate.Enter(); err != nil {
		return backend.Grant{}, err
	}
	defer b.gate.Leave()
	at := backend.Instant(req.ScheduledAt)
	ttl := sqlledger.MicrosTTL(req.TTL)
	var (
		g     backend.Grant
		exist *backend.Run
	)
	// The record first, outside the transaction (a READ COMMITTED read in
	// it would see the same): most claims of an occurrence are losers that
	// find the winner's record, and they are done in one round trip.
	var r backend.Run
	st, err := b.stmt(ctx, `SELECT `+b.led.Cols+` FROM `+b.tRuns+` WHERE job = ? AND scheduled_at = ?`)
	if err == nil {
		r, err = b.led.D.ScanRun(st.QueryRowContext(ctx, req.Job, at))
	}
	switch {
	case err == nil:
		exist = &r
	case !errors.Is(err, sql.ErrNoRows):
		return backend.Grant{}, stepErr(ctx, err)
	default:
		err = b.tx(ctx, func(tx *sql.Tx) error { return b.claimTx(ctx, tx, req, at, ttl, &g) })
	}
	if errors.Is(err, errLostRace) {
		r, gerr := b.getRun(ctx, b.db, req.Job, at, "")
		if gerr != nil {
			return backend.Grant{}, stepErr(ctx, gerr)
		}
		exist, err = &r, nil
	}
	switch {
	case sqlledger.Verdict(err):
		return backend.Grant{}, err
	case err != nil:
		return backend.Grant{}, stepErr(ctx, err)
	case exist == nil:
		return g, nil
	}
	if renew, err := sqlledger.Existing(req, *exist); !renew {
		return backend.Grant{}, err
	}
	// A retry: renew it.
	n, err := b.led.Renew(ctx, b.led.DB, req, at, exist.Token)
	switch {
	case err != nil:
		return backend.Grant{}, stepErr(ctx, err)
	case n == 0: // taken over or finished meanwhile
		r, err := b.getRun(ctx, b.db, req.Job, at, "")
		if err != nil {
			return backend.Grant{}, stepErr(ctx, err)
		}
		return backend.Grant{}, &backend.ClaimedError{Run: r}
	}
	return backend.Grant{Token: exist.Token, TTL: ttl}, nil
}

// claimTx is Claim's transaction, for an occurrence with no record: INSERT
// the run unless it is in the future beyond MaxEarly; take the job's next
// token; set it on the run unless the occurrence is older than MaxLate —
// both by the server's clock, MaxLate judged once the INSERT holds the key,
// in the same statement as the token (no round trip of its own) and before
// MaxRunning; count running occurrences when MaxRunning is set. Every
// refusal rolls the transaction back.
func (b *Backend) claimTx(ctx context.Context, tx *sql.Tx, req backend.ClaimRequest, at time.Time, ttl time.Duration, g *backend.Grant) error {
	res, err := b.execIn(ctx, tx, `INSERT INTO `+b.tRuns+` (job, scheduled_at, spec_version, instance, nonce, token,
		attempt, state, claimed_at, expires_at, result, error)
		SELECT ?, ?, ?, ?, ?, 0, 1, 'running', NOW(6), NOW(6) + INTERVAL ? MICROSECOND, '', ''
		FROM DUAL WHERE ? <= NOW(6) + INTERVAL ? MICROSECOND`,
		req.Job, at, req.SpecVersion, req.Owner.Instance, req.Owner.Nonce[:], sqlledger.Micros(req.TTL), at, sqlledger.Micros(req.MaxEarly))
	if isErr(err, errDupEntry) {
		return errLostRace
	}
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		now, err := serverNow(ctx, tx)
		if err != nil {
			return err
		}
		return sqlledger.TooEarly(req, at, now)
	}
	res, err = b.execIn(ctx, tx, b.bumpSQL(), req.Job, at, req.SpecVersion)
	if err != nil {
		return err
	}
	token, err := res.LastInsertId()
	if err != nil {
		return err
	}
	setToken := `UPDATE ` + b.tRuns + ` SET token = ? WHERE job = ? AND scheduled_at = ?`
	args := []any{token, req.Job, at}
	if req.MaxLate > 0 {
		setToken += ` AND ? >= NOW(6) - INTERVAL ? MICROSECOND`
		args = append(args, at, sqlledger.Micros(req.MaxLate))
	}
	res, err = b.execIn(ctx, tx, setToken, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 { // the run is ours (inserted above): only MaxLate can miss
		now, err := serverNow(ctx, tx)
		if err != nil {
			return err
		}
		return sqlledger.TooLate(req, at, now)
	}
	if req.MaxRunning > 0 {
		n, err := b.led.Running(ctx, sqlledger.Std{Q: tx}, req.Job, at)
		if err != nil {
			return err
		}
		if n >= req.MaxRunning {
			return sqlledger.Overlap(req, n)
		}
	}
	*g = backend.Grant{Token: uint64(token), TTL: ttl}
	return nil
}

// serverNow reads the server's clock, for an error message.
func serverNow(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (time.Time, error) {
	var now time.Time
	err := q.QueryRowContext(ctx, `SELECT NOW(6)`).Scan(&now)
	return now, err
}

// Heartbeat implements backend.Ledger (sqlledger: a guarded UPDATE).
func (b *Backend) Heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	return b.g.Heartbeat(ctx, req, b.led.Heartbeat)
}

// Finish implements backend.Ledger (sqlledger: a guarded UPDATE).
func (b *Backend) Finish(ctx context.Context, req backend.FinishRequest) error {
	return b.g.Finish(ctx, req, b.led.Finish)
}

// Reclaim implements backend.Ledger (the run's row is locked FOR UPDATE;
// it exists, so the lock is real even at READ COMMITTED).
func (b *Backend) Reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	return b.g.Reclaim(ctx, req, b.reclaim)
}

func (b *Backend) reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	if err := b.gate.Enter(); err != nil {
		return backend.Grant{}, backend.Run{}, err
	}
	defer b.gate.Leave()
	at := backend.Instant(req.ScheduledAt)
	ttl := sqlledger.MicrosTTL(req.TTL)
	var (
		g   backend.Grant
		run backend.Run
	)
	err := b.tx(ctx, func(tx *sql.Tx) error {
		r, err := b.getRun(ctx, tx, req.Job, at, " FOR UPDATE")
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return sqlledger.NeverClaimed(req.Job, at)
		case err != nil:
			return err
		}
		if renew, err := sqlledger.Reclaim(req, at, r, !r.Expired); err != nil {
			return err
		} else if renew { // a retry
			if _, err := b.led.Renew(ctx, sqlledger.Std{Q: tx}, req, at, r.Token); err != nil {
				return err
			}
			g, run = backend.Grant{Token: r.Token, TTL: ttl}, r
			return nil
		}
		res, err := tx.ExecContext(ctx, `UPDATE `+b.tJobs+` SET counter = LAST_INSERT_ID(counter + 1) WHERE job = ?`, req.Job)
		if err != nil {
			return err
		}
		token, err := res.LastInsertId()
		if err != nil {
			return err
		}
		if req.MaxRunning > 0 {
			// Counted under the job row's lock (taken by the bump above), as
			// Claim counts: the job's other occurrences under live leases.
			n, err := b.led.Running(ctx, sqlledger.Std{Q: tx}, req.Job, at)
			if err != nil {
				return err
			}
			if n >= req.MaxRunning {
				return sqlledger.OverlapOther(req, at, n)
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+b.tRuns+` SET instance = ?, nonce = ?, token = ?, attempt = attempt + 1,
			spec_version = ?, claimed_at = NOW(6), expires_at = NOW(6) + INTERVAL ? MICROSECOND
			WHERE job = ? AND scheduled_at = ?`,
			req.Owner.Instance, req.Owner.Nonce[:], token, req.SpecVersion, sqlledger.Micros(req.TTL), req.Job, at); err != nil {
			return err
		}
		run, err = b.getRun(ctx, tx, req.Job, at, "")
		g = backend.Grant{Token: uint64(token), TTL: ttl}
		return err
	})
	if err != nil {
		if sqlledger.Verdict(err) {
			return backend.Grant{}, backend.Run{}, err
		}
		return backend.Grant{}, backend.Run{}, stepErr(ctx, err)
	}
	return g, run, nil
}

// Abandon implements backend.Ledger.
func (b *Backend) Abandon(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	return b.g.Abandon(ctx, job, at, b.abandon)
}

func (b *Backend) abandon(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	if err := b.gate.Enter(); err != nil {
		return backend.Run{}, err
	}
	defer b.gate.Leave()
	at = backend.Instant(at)
	// The update and the read of its result in one transaction: the row
	// stays locked until both are done, so a Prune cannot delete the run
	// this call abandoned in between and have it answered "never claimed".
	var n int64
	var r backend.Run
	var readErr error
	err := b.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE `+b.tRuns+` SET state = 'abandoned', finished_at = NOW(6)
			WHERE job = ? AND scheduled_at = ? AND state = 'running' AND expires_at <= NOW(6)`, job, at)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		r, readErr = b.getRun(ctx, tx, job, at, "")
		if readErr != nil && !errors.Is(readErr, sql.ErrNoRows) {
			return readErr
		}
		return nil
	})
	if err != nil {
		return backend.Run{}, stepErr(ctx, err)
	}
	err = readErr
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return backend.Run{}, sqlledger.NeverClaimed(job, at)
	case err != nil:
		return backend.Run{}, stepErr(ctx, err)
	case n == 1:
		return r, nil
	}
	// Not abandoned: the UPDATE's guard failed, so it is finished or its
	// lease is live (live true: an expired running one was abandoned).
	return backend.Run{}, sqlledger.Abandon(job, at, r, true)
}

// GetRun implements backend.Ledger (sqlledger).
func (b *Backend) GetRun(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	return b.g.GetRun(ctx, job, at, b.led.GetRun)
}

// HighWater implements backend.Ledger (sqlledger).
func (b *Backend) HighWater(ctx context.Context, job string) (time.Time, string, error) {
	return b.g.HighWater(ctx, job, b.led.HighWater)
}

// ListRuns implements backend.Ledger (sqlledger): newest ScheduledAt
// first, then job.
func (b *Backend) ListRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	return b.g.ListRuns(ctx, f, b.led.ListRuns)
}

// Prune implements backend.Ledger (sqlledger, with newLedger's PruneSQL:
// one DELETE … ORDER BY finished_at LIMIT batch through the finished_at
// index). Running occurrences (whose finished_at is NULL), counters and
// high-water marks are never touched.
func (b *Backend) Prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	return b.g.Prune(ctx, olderThan, batch, b.led.Prune)
}
