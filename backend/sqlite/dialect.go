package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/sqlledger"
)

// dialect is SQLite's SQL for the ledger and the lease layer written once
// in internal/sqlledger. It differs from the server databases in its
// clock: one host, so expiry is judged in Go by the boot-scoped monotonic
// clock (expires_ns, boot_id) and instants are stored in milliseconds
// (scheduled_ms); Now is empty, and the guarded updates, Claim, Reclaim
// and Abandon read that clock inside their write transaction (ledger.go),
// as Acquire, Renew and Release do (leases.go).
func dialect() *sqlledger.Dialect {
	return &sqlledger.Dialect{
		HighColumn: "high_ms",
		AtColumn:   "scheduled_ms",
		KeyColumn:  "key",
		Instant:    func(t time.Time) any { return t.UnixMilli() },
		ScanInstant: func() (any, func() (time.Time, bool)) {
			var ms sql.NullInt64
			return &ms, func() (time.Time, bool) { return fromMs(ms.Int64), ms.Valid }
		},
		NotInJob: "instr(job, %s) = 0",
		NoRows:   sql.ErrNoRows,
		Err:      stepErr,
	}
}

// newLedger returns the shared ledger over b's database.
func newLedger(b *Backend) *sqlledger.Ledger {
	return &sqlledger.Ledger{
		D:    dialect(),
		DB:   sqlledger.Std{Q: b.db},
		Gate: &b.gate,
		Jobs: "jobs",
		Runs: "runs",
		Cols: runCols,
		// The clock is read first (after the gate), and Expired judged by
		// it and the boot id.
		Reader: func() (sqlledger.ScanFunc, error) {
			now, err := b.now()
			if err != nil {
				return nil, err
			}
			return func(s sqlledger.Scanner) (backend.Run, error) {
				r, err := scanRun(s)
				if err != nil {
					return backend.Run{}, err
				}
				return b.view(r, now), nil
			}, nil
		},
		// Every write is an immediate transaction (write).
		Write: func(ctx context.Context, q string, args ...any) (int64, error) {
			var n int64
			err := b.write(ctx, func(tx *sql.Tx) error {
				var err error
				if n, err = (sqlledger.Std{Q: tx}).Exec(ctx, q, args...); err != nil {
					return stepErr(ctx, err)
				}
				return nil
			})
			return n, err
		},
		// SQLite's DELETE takes no LIMIT (without a compile-time option):
		// the batch is chosen by rowid. Finished states are listed, so the
		// index on (state, finished_at_ms) serves; olderThan is rounded up
		// to the stored millisecond.
		PruneSQL: `DELETE FROM runs WHERE rowid IN (
			SELECT rowid FROM runs WHERE state IN ('succeeded', 'failed', 'abandoned') AND finished_at_ms < ? LIMIT ?)`,
		PruneBefore: func(t time.Time) any { return backend.CeilInstant(t).UnixMilli() },
	}
}
