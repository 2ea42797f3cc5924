package zookeeper_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestRecordsLayout checks the record store's nodes as the package doc
// describes them: a record of the longest unicode name with an Expires at
// the Unix epoch (0 ms, which must stay set) has its node, its creator's
// mark and its index entry; PruneRecords deletes all three with the
// name's node and the hour bucket, and DeleteRecord its record's name
// node.
func TestRecordsLayout(t *testing.T) {
	t.Parallel()
	srv := testserver.ZooKeeper(t)
	b := open(t, srv.Addr(), 10*time.Second)
	ctx, conn := context.Background(), b.Conn()
	name := strings.Repeat("é", backend.MaxKeyLen/2)
	o := backend.Owner{Instance: "i", Nonce: backend.NewNonce()}
	epoch := time.UnixMilli(0).UTC()
	r, mine, err := b.CreateRecord(ctx, backend.CreateRecordRequest{Name: name, Seq: 42, Value: "v", Owner: o, Expires: epoch})
	if err != nil || !mine || !r.Expires.Equal(epoch) || r.Expires.IsZero() {
		t.Fatalf("CreateRecord = %+v, %v, %v; want mine, expiring at the epoch", r, mine, err)
	}
	dir := b.Prefix() + "/records/k" + url.QueryEscape(name)
	rp := dir + "/0000000000000000042"
	entry := b.Prefix() + "/records-exp/1970010100/00000000000000000000-k" + url.QueryEscape(name) + "-0000000000000000042"
	for _, p := range []string{rp, rp + "/" + o.Nonce.String(), entry} {
		if ok, _, err := conn.Exists(p); err != nil || !ok {
			t.Fatalf("node %s: exists=%v, %v; want it there", p, ok, err)
		}
	}
	got, err := b.ListRecords(ctx, backend.ListRecordsRequest{Name: name})
	if err != nil || len(got) != 1 || got[0].Expires.IsZero() || !got[0].Expires.Equal(epoch) || got[0].Owner != o {
		t.Fatalf("ListRecords = %+v, %v; want the record, expiring at the epoch", got, err)
	}
	if n, err := b.PruneRecords(ctx, time.Now(), 10); err != nil || n != 1 {
		t.Fatalf("PruneRecords = %d, %v; want 1", n, err)
	}
	for _, p := range []string{dir, entry[:strings.LastIndex(entry, "/")]} {
		if ok, _, err := conn.Exists(p); err != nil || ok {
			t.Fatalf("node %s after the prune: exists=%v, %v; want it gone", p, ok, err)
		}
	}
	if _, _, err := b.CreateRecord(ctx, backend.CreateRecordRequest{Name: "keep", Seq: 1, Value: "v", Owner: o}); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteRecord(ctx, backend.DeleteRecordRequest{Name: "keep", Seq: 1, Owner: o}); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := conn.Exists(b.Prefix() + "/records/kkeep"); err != nil || ok {
		t.Fatalf("a name's node after its last record's delete: exists=%v, %v; want it gone", ok, err)
	}
	// A record whose mark is gone (not written by the backend) is an
	// error, not a delete retried forever.
	if _, _, err := b.CreateRecord(ctx, backend.CreateRecordRequest{Name: "marked", Seq: 1, Value: "v", Owner: o}); err != nil {
		t.Fatal(err)
	}
	if err := conn.Delete(b.Prefix()+"/records/kmarked/0000000000000000001/"+o.Nonce.String(), -1); err != nil {
		t.Fatal(err)
	}
	bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.DeleteRecord(bounded, backend.DeleteRecordRequest{Name: "marked", Seq: 1, Owner: o}); err == nil || bounded.Err() != nil || !strings.Contains(err.Error(), "mark") {
		t.Fatalf("DeleteRecord of a record without its mark = %v; want an error saying so, at once", err)
	}
}
