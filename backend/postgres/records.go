package postgres

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/sqlledger"
)

var _ backend.Records = (*Backend)(nil)

// newRecords returns the shared record store over b's records table. Each
// statement commits by itself (a create's insert and its read are two:
// the read, a statement of its own at READ COMMITTED, sees the record
// that its insert's ON CONFLICT DO NOTHING waited for). A prune picks the
// expired records through the index on expires and locks them SKIP
// LOCKED, as Prune of runs does, so that concurrent pruners do not queue
// behind each other (PostgreSQL's DELETE has no LIMIT).
func newRecords(b *Backend) *sqlledger.Records {
	return &sqlledger.Records{
		D: b.led.D, DB: b.led.DB, Gate: &b.gate, Table: b.tRecords,
		Write: func(ctx context.Context, fn func(q sqlledger.DB) error) error { return fn(b.led.DB) },
		PruneSQL: `DELETE FROM ` + b.tRecords + ` r USING (
			SELECT name, seq FROM ` + b.tRecords + `
			WHERE expires < ? ORDER BY expires LIMIT ? FOR UPDATE SKIP LOCKED
		) d WHERE r.name = d.name AND r.seq = d.seq`,
	}
}

// CreateRecord implements backend.Records (sqlledger): first-wins by
// (name, seq), INSERT … ON CONFLICT DO NOTHING and then a read of the
// record that holds the place.
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
// PruneSQL: one DELETE of at most batch expired records, FOR UPDATE SKIP
// LOCKED). Records without Expires, and runs, are never touched.
func (b *Backend) PruneRecords(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	return b.g.PruneRecords(ctx, olderThan, batch, b.recs.PruneRecords)
}
