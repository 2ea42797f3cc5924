package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/internal/sqlledger"
)

// remainingUS is the SQL for the lease's remaining time in microseconds.
const remainingUS = `(extract(epoch FROM (expires_at - clock_timestamp())) * 1000000)::bigint`

// dialect is PostgreSQL's SQL for the ledger and the lease layer written
// once in internal/sqlledger: $n placeholders, clock_timestamp() (the
// clock every statement judges expiry by; now() would be the
// transaction's start), intervals in microseconds, strpos, BIGINT tokens,
// and dbErr's classification of SQLSTATEs.
func dialect() *sqlledger.Dialect {
	return &sqlledger.Dialect{
		Numbered:   true,
		Now:        `clock_timestamp()`,
		Later:      func(arg string) string { return `clock_timestamp() + ` + arg + ` * interval '1 microsecond'` },
		HighColumn: "high_at",
		AtColumn:   "scheduled_at",
		KeyColumn:  "key",
		Remaining:  remainingUS,
		Instant:    func(t time.Time) any { return t },
		NotInJob:   "strpos(job, %s) = 0",
		NoRows:     pgx.ErrNoRows,
		Err:        stepErr,
	}
}

// newLedger returns the shared ledger over b's tables.
func newLedger(b *Backend) *sqlledger.Ledger {
	l := sqlledger.ServerClock(dialect(), pgxDB{b.pool}, &b.gate, b.tJobs, b.tRuns,
		func(ctx context.Context, q string, args ...any) (int64, error) {
			tag, err := b.pool.Exec(ctx, q, args...)
			if err != nil {
				return 0, stepErr(ctx, err)
			}
			return tag.RowsAffected(), nil
		})
	// The finished runs to delete are picked through the partial index on
	// finished_at and locked SKIP LOCKED, so that concurrent pruners do not
	// queue behind each other (PostgreSQL's DELETE has no LIMIT).
	// olderThan is rounded up to the microsecond, timestamptz's resolution.
	l.PruneSQL = `DELETE FROM ` + b.tRuns + ` r USING (
			SELECT job, scheduled_at FROM ` + b.tRuns + `
			WHERE finished_at < ? AND state <> 'running'
			ORDER BY finished_at LIMIT ? FOR UPDATE SKIP LOCKED
		) d WHERE r.job = d.job AND r.scheduled_at = d.scheduled_at`
	l.PruneBefore = func(t time.Time) any { return ceilMicro(t) }
	return l
}

// pgxQuerier is the pool or a transaction.
type pgxQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// pgxDB is the pool or a transaction as a sqlledger.DB.
type pgxDB struct{ q pgxQuerier }

func (d pgxDB) QueryRow(ctx context.Context, q string, args ...any) sqlledger.Scanner {
	return d.q.QueryRow(ctx, q, args...)
}

func (d pgxDB) Query(ctx context.Context, q string, args ...any) (sqlledger.Rows, error) {
	rows, err := d.q.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (d pgxDB) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := d.q.Exec(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// ceilMicro rounds t up to the microsecond, PostgreSQL's resolution, so
// that "stored < ceilMicro(t)" equals "stored < t".
func ceilMicro(t time.Time) time.Time {
	if r := t.Truncate(time.Microsecond); !r.Equal(t) {
		return r.Add(time.Microsecond)
	}
	return t
}
