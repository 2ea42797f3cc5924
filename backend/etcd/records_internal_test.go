package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestConcurrentPruneRecordsKeepARecreatedRecord: PruneRecords lists the
// expiry index, then deletes each entry's record. Two prunes and a create
// between them:
//
//	A creates R, expired (index entry e)
//	P2 lists the index: [e]
//	P1 prunes R and e; B creates R again, same Expires (entry e again)
//	P2 goes on to e's record
//
// P2 must not delete B's record, which was created after its listing.
func TestConcurrentPruneRecordsKeepARecreatedRecord(t *testing.T) {
	srv := testserver.Etcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := OpenConfig(ctx, Config{Endpoints: []string{srv.Addr()}, Prefix: "prr/"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	exp := time.Now().Add(-time.Hour)
	create := func(instance string) backend.Owner {
		o := backend.Owner{Instance: instance, Nonce: backend.NewNonce()}
		if _, mine, err := b.CreateRecord(ctx, backend.CreateRecordRequest{Name: "r", Seq: 1, Value: instance, Owner: o, Expires: exp}); err != nil || !mine {
			t.Fatalf("CreateRecord by %s: mine=%v, %v", instance, mine, err)
		}
		return o
	}
	create("A")
	to, _ := b.recIndexEnd(time.Now())
	listed, err := b.c.Get(ctx, b.prefix+"recx/", clientv3.WithRange(to), clientv3.WithKeysOnly())
	if err != nil || len(listed.Kvs) != 1 {
		t.Fatalf("P2's listing: %v, %v", listed, err)
	}
	if n, err := b.PruneRecords(ctx, time.Now(), 10); err != nil || n != 1 {
		t.Fatalf("P1: PruneRecords = %d, %v; want 1", n, err)
	}
	bo := create("B")
	n, _, err := b.pruneRecordEntries(ctx, listed.Kvs)
	if err != nil || n != 0 {
		t.Fatalf("P2's deletes of its stale listing = %d, %v; want 0", n, err)
	}
	got, err := b.ListRecords(ctx, backend.ListRecordsRequest{Name: "r"})
	if err != nil || len(got) != 1 || got[0].Owner != bo {
		t.Fatalf("after P2, ListRecords = %+v, %v; want B's record", got, err)
	}
	// B's record is still indexed: a later prune deletes it.
	if n, err := b.PruneRecords(ctx, time.Now(), 10); err != nil || n != 1 {
		t.Fatalf("a later PruneRecords = %d, %v; want B's record", n, err)
	}
}

// TestRecordCallCutOffBySentContext: a record call whose context ends
// after the pre-send check answers with the context's error (from the
// client), not with its cause.
func TestRecordCallCutOffBySentContext(t *testing.T) {
	srv := testserver.Etcd(t)
	b, err := OpenConfig(context.Background(), Config{Endpoints: []string{srv.Addr()}, Prefix: "rcx/"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(backend.ErrNotFound)
	_, err = b.c.Get(ctx, b.recKey("n", 1))
	err = b.fail(err, "")
	if !errors.Is(err, context.Canceled) || errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("a read with a cancelled context: %v; want context.Canceled, not its cause", err)
	}
}

// TestRecordIndexEnd: the expiry index's range below olderThan holds the
// whole ms before it, at any precision of olderThan.
func TestRecordIndexEnd(t *testing.T) {
	b := &Backend{prefix: "p/"}
	for _, c := range []struct {
		at   time.Time
		want string
		ok   bool
	}{
		{time.UnixMilli(0), "", false},
		{time.UnixMilli(-5), "", false},
		{time.Unix(0, 1), "p/recx/000000000000001", true},
		{time.UnixMilli(1700000000123), "p/recx/001700000000123", true},
		{time.UnixMilli(1700000000123).Add(time.Microsecond), "p/recx/001700000000124", true},
		{time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), "p/recx/253402300800000", true},
		{time.Date(40000, 1, 1, 0, 0, 0, 0, time.UTC), clientv3.GetPrefixRangeEnd("p/recx/"), true},
	} {
		got, ok := b.recIndexEnd(c.at)
		if got != c.want || ok != c.ok {
			t.Errorf("recIndexEnd(%v) = %q, %v; want %q, %v", c.at, got, ok, c.want, c.ok)
		}
	}
}
