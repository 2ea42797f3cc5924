package mysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/leasehold/leasehold/internal/sqlledger"
)

// dialect is MySQL's and MariaDB's SQL for the ledger and the lease layer
// written once in internal/sqlledger: ? placeholders, NOW(6) (the clock
// every statement judges expiry by), INTERVAL … MICROSECOND,
// TIMESTAMPDIFF, LOCATE, the leases' key column k, BIGINT UNSIGNED tokens,
// and dbErr's classification of server errors.
func dialect() *sqlledger.Dialect {
	return &sqlledger.Dialect{
		Now:           `NOW(6)`,
		Later:         func(arg string) string { return `NOW(6) + INTERVAL ` + arg + ` MICROSECOND` },
		HighColumn:    "high_at",
		AtColumn:      "scheduled_at",
		KeyColumn:     "k",
		Remaining:     `TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at)`,
		Instant:       func(t time.Time) any { return t },
		NotInJob:      "LOCATE(%s, job) = 0",
		UnsignedToken: true,
		NoRows:        sql.ErrNoRows,
		Err:           stepErr,
	}
}

// newLedger returns the shared ledger over b's tables.
func newLedger(b *Backend) *sqlledger.Ledger {
	l := sqlledger.ServerClock(dialect(), sqlledger.Std{Q: b.db}, &b.gate, b.tJobs, b.tRuns, b.exec)
	// MySQL's DELETE takes ORDER BY and LIMIT itself: one statement walks
	// the by_finish index and stops at batch. Concurrent pruners may wait
	// for each other's row locks; a deadlock between them is retried by
	// exec. olderThan is sent as it is, in UTC.
	l.PruneSQL = `DELETE FROM ` + b.tRuns + `
		WHERE finished_at < ? AND state <> 'running' ORDER BY finished_at LIMIT ?`
	l.PruneBefore = func(t time.Time) any { return t.UTC() }
	return l
}

// exec runs one writing statement, retrying deadlocks, and returns the
// number of rows it matched (the connection counts found rows).
func (b *Backend) exec(ctx context.Context, q string, args ...any) (int64, error) {
	var n int64
	err := retryDeadlock(ctx, func() error {
		res, err := b.db.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, stepErr(ctx, err)
	}
	return n, nil
}
