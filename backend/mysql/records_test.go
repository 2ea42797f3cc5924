package mysql

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/backend"
)

// TestRecordsTableIsAdditive: tables at the current schema version without
// the records table (as an older release leaves them) get it at the next
// open, and their version is unchanged, so that the older release still
// opens them.
func TestRecordsTableIsAdditive(t *testing.T) {
	ctx := context.Background()
	b, u := openTest(t)
	if _, err := b.db.ExecContext(ctx, `DROP TABLE `+b.tRecords); err != nil {
		t.Fatal(err)
	}
	b.Close()
	b, err := Open(ctx, u)
	if err != nil {
		t.Fatalf("Open of tables without the records table: %v", err)
	}
	defer b.Close()
	var v int
	if err := b.db.QueryRowContext(ctx, `SELECT value FROM `+b.tMeta+` WHERE name = 'schema_version'`).Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("schema version after the records table was added = %d, %v; want %d", v, err, schemaVersion)
	}
	req := backend.CreateRecordRequest{Name: "n", Seq: 1, Value: "v", Owner: backend.Owner{Instance: "i", Nonce: backend.NewNonce()}}
	if _, mine, err := b.CreateRecord(ctx, req); err != nil || !mine {
		t.Fatalf("CreateRecord in the added table: mine=%v, %v", mine, err)
	}
}
