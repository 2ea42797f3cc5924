//go:build linux

package sqlite

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/backend"
)

// TestRecordsTableIsAdditive: a file at the current schema version without
// the records table (as an older release leaves it) gets it at the next
// open, and its version is unchanged, so that the older release still
// opens it.
func TestRecordsTableIsAdditive(t *testing.T) {
	ctx := context.Background()
	path := dbPath(t)
	b := open(t, path)
	if _, err := b.db.ExecContext(ctx, `DROP TABLE records`); err != nil {
		t.Fatal(err)
	}
	b.Close()
	b = open(t, path)
	var v int
	if err := b.db.QueryRowContext(ctx, `SELECT value FROM meta WHERE name = 'schema_version'`).Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("schema version after the records table was added = %d, %v; want %d", v, err, schemaVersion)
	}
	req := backend.CreateRecordRequest{Name: "n", Seq: 1, Value: "v", Owner: backend.Owner{Instance: "i", Nonce: backend.NewNonce()}}
	if _, mine, err := b.CreateRecord(ctx, req); err != nil || !mine {
		t.Fatalf("CreateRecord in the added table: mine=%v, %v", mine, err)
	}
}
