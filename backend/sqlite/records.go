package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/sqlledger"
)

var _ backend.Records = (*Backend)(nil)

// newRecords returns the shared record store over b's records table. A
// write is one immediate transaction (inTx: writers of every process are
// serialised by the file lock, waiting up to the busy timeout), so a
// create's INSERT … ON CONFLICT DO NOTHING and its read of the record
// that holds the place are one. SQLite's DELETE takes no LIMIT (without a
// compile-time option): a prune's batch is chosen by rowid through the
// index on expires, as Prune of runs does.
func newRecords(b *Backend) *sqlledger.Records {
	return &sqlledger.Records{
		D: b.led.D, DB: b.led.DB, Gate: &b.gate, Table: "records",
		Write: func(ctx context.Context, fn func(q sqlledger.DB) error) error {
			return b.inTx(ctx, func(tx *sql.Tx) error { return fn(sqlledger.Std{Q: tx}) })
		},
		PruneSQL: `DELETE FROM records WHERE rowid IN (
			SELECT rowid FROM records WHERE expires < ? LIMIT ?)`,
	}
}

// CreateRecord implements backend.Records (sqlledger): first-wins by
// (name, seq), in one immediate transaction.
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
// PruneSQL: at most batch expired records, chosen by rowid). Records
// without Expires, and runs, are never touched.
func (b *Backend) PruneRecords(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	return b.g.PruneRecords(ctx, olderThan, batch, b.recs.PruneRecords)
}
