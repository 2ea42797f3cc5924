package mysql

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/sqlledger"
)

var _ backend.Records = (*Backend)(nil)

// newRecords returns the shared record store over b's records table. Each
// statement commits by itself, and a deadlock victim (nothing applied) is
// run again, as exec does. A create's insert is a plain INSERT whose
// duplicate-key error (1062) says the place is taken, as Claim's is: never
// INSERT IGNORE, which would also turn a value too long into a warning,
// and not ON DUPLICATE KEY UPDATE, which under clientFoundRows counts a
// taken place as a row like an insert. The read that follows, a statement
// of its own, sees the record the insert waited for. MySQL's DELETE takes
// ORDER BY and LIMIT itself: a prune walks the by_expires index and stops
// at batch, as Prune of runs does.
func newRecords(b *Backend) *sqlledger.Records {
	return &sqlledger.Records{
		D: b.led.D, DB: b.led.DB, Gate: &b.gate, Table: b.tRecords,
		Write: func(ctx context.Context, fn func(q sqlledger.DB) error) error {
			return retryDeadlock(ctx, func() error { return fn(b.led.DB) })
		},
		Duplicate: func(err error) bool { return isErr(err, errDupEntry) },
		PruneSQL:  `DELETE FROM ` + b.tRecords + ` WHERE expires < ? ORDER BY expires LIMIT ?`,
	}
}

// CreateRecord implements backend.Records (sqlledger): first-wins by
// (name, seq), a plain INSERT and then a read of the record that holds the
// place.
func (b *Backend) CreateRecord(ctx context.Context, req backend.CreateRecordRequest) (backend.Record, bool, error) {
	return b.g.CreateRecord(ctx, req, b.recs.CreateRecord)
}

// ListRecords implements backend.Records (sqlledger): greatest seq first.
func (b *Backend) ListRecords(ctx context.Context, req backend.ListRecordsRequest) ([]backend.Record, error) {
	return b.g.ListRecords(ctx, req, b.recs.ListRecords)
}

// DeleteRecord implements backend.Records (sqlledger): a DELETE guarded by
// the creator's instance and nonce.
func (b *Backend) DeleteRecord(ctx context.Context, req backend.DeleteRecordRequest) error {
	return b.g.DeleteRecord(ctx, req, b.recs.DeleteRecord)
}

// PruneRecords implements backend.Records (sqlledger, with newRecords'
// PruneSQL: one DELETE … ORDER BY expires LIMIT batch). Records without
// Expires, and runs, are never touched.
func (b *Backend) PruneRecords(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	return b.g.PruneRecords(ctx, olderThan, batch, b.recs.PruneRecords)
}
