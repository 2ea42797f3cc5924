package etcd

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/recordcodec"
)

// Record store layout under the prefix (backend.Records), apart from the
// ledger's keys (runs.go):
//
//	rec/<name>/<seq>                 a record (JSON: value, owner, expires)
//	recx/<expires ms>/<name>/<seq>   index of records with Expires, for
//	                                 PruneRecords; written and deleted in
//	                                 the same Txn as its record
//
// Names are query-escaped (as job names are), so an escaped name holds no
// "/" and the range rec/<name>/ of one name never contains another name's
// keys (e.g. "jobs/a" and "jobs/a:b"). Seqs are 19-digit zero-padded
// decimals (every int64 ≥ 0), so key order is seq order within a name;
// expiry instants are 15-digit zero-padded Unix ms (every year up to
// 9999), so key order is expiry order.

func (b *Backend) recPrefix(name string) string { return b.prefix + "rec/" + escJob(name) + "/" }

func (b *Backend) recKey(name string, seq int64) string {
	return fmt.Sprintf("%s%019d", b.recPrefix(name), seq)
}

// recIndexKey is the expiry-index key of a record that expires at ms.
func (b *Backend) recIndexKey(ms int64, name string, seq int64) string {
	return fmt.Sprintf("%srecx/%015d/%s/%019d", b.prefix, ms, escJob(name), seq)
}

// indexKeyOf is the record's expiry-index key; "" if it never expires.
func (b *Backend) indexKeyOf(r recordcodec.Stored) string {
	if r.Expires == nil {
		return ""
	}
	return b.recIndexKey(*r.Expires, r.Name, r.Seq)
}

// CreateRecord implements backend.Records: one Txn creates the record (and
// its expiry-index key) if its key has never been created since it was last
// deleted, else reads the record there, which is the caller's when its
// owner (instance and nonce) is the request's.
func (b *Backend) CreateRecord(ctx context.Context, req backend.CreateRecordRequest) (backend.Record, bool, error) {
	return b.g.CreateRecord(ctx, req, b.createRecord)
}

func (b *Backend) createRecord(ctx context.Context, req backend.CreateRecordRequest) (backend.Record, bool, error) {
	if ctx.Err() != nil {
		return backend.Record{}, false, backend.NotSent(ctx)
	}
	r := recordcodec.New(req, true)
	k := b.recKey(req.Name, req.Seq)
	put := []clientv3.Op{clientv3.OpPut(k, string(r.Encode()))}
	if ik := b.indexKeyOf(r); ik != "" {
		put = append(put, clientv3.OpPut(ik, ""))
	}
	resp, err := b.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(put...).
		Else(clientv3.OpGet(k)).
		Commit()
	if err != nil {
		return backend.Record{}, false, b.fail(err, "")
	}
	if resp.Succeeded {
		return r.Record(r.Name, r.Seq), true, nil
	}
	kv := first(resp.Responses[0])
	if kv == nil {
		// The Else branch runs only when the key exists, in the same Txn.
		return backend.Record{}, false, fmt.Errorf("record key %q exists but was not read", k)
	}
	there, err := recordcodec.Decode(kv.Value)
	if err != nil {
		return backend.Record{}, false, err
	}
	return there.Record(there.Name, there.Seq), there.Owner() == req.Owner, nil
}

// ListRecords implements backend.Records: one range read of the name's
// keys below the key of req.Before (all of them when it is 0), sorted by
// key descending, at most req.Limit.
func (b *Backend) ListRecords(ctx context.Context, req backend.ListRecordsRequest) ([]backend.Record, error) {
	return b.g.ListRecords(ctx, req, b.listRecords)
}

func (b *Backend) listRecords(ctx context.Context, req backend.ListRecordsRequest) ([]backend.Record, error) {
	if ctx.Err() != nil {
		return nil, backend.NotSent(ctx)
	}
	from := b.recPrefix(req.Name)
	to := clientv3.GetPrefixRangeEnd(from)
	if req.Before != 0 {
		to = b.recKey(req.Name, req.Before)
	}
	resp, err := b.c.Get(ctx, from, clientv3.WithRange(to),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(req.Limit)))
	if err != nil {
		return nil, b.fail(err, "")
	}
	var out []backend.Record
	for _, kv := range resp.Kvs {
		r, err := recordcodec.Decode(kv.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, r.Record(r.Name, r.Seq))
	}
	return out, nil
}

// DeleteRecord implements backend.Records: it reads the record and, if
// req.Owner created it, deletes it with its expiry-index key in a Txn that
// holds only while the record is the one read (read again if not).
func (b *Backend) DeleteRecord(ctx context.Context, req backend.DeleteRecordRequest) error {
	return b.g.DeleteRecord(ctx, req, b.deleteRecord)
}

func (b *Backend) deleteRecord(ctx context.Context, req backend.DeleteRecordRequest) error {
	if ctx.Err() != nil {
		return backend.NotSent(ctx)
	}
	k := b.recKey(req.Name, req.Seq)
	for {
		resp, err := b.c.Get(ctx, k)
		if err != nil {
			return b.fail(err, "read the record")
		}
		if len(resp.Kvs) == 0 {
			return backend.ErrNotFound
		}
		kv := resp.Kvs[0]
		r, err := recordcodec.Decode(kv.Value)
		if err != nil {
			return err
		}
		if r.Owner() != req.Owner {
			return backend.ErrNotFound
		}
		del := []clientv3.Op{clientv3.OpDelete(k)}
		if ik := b.indexKeyOf(r); ik != "" {
			del = append(del, clientv3.OpDelete(ik))
		}
		tr, err := b.c.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(k), "=", kv.ModRevision)).
			Then(del...).
			Commit()
		if err != nil {
			return b.fail(err, "")
		}
		if tr.Succeeded {
			return nil
		}
		// Deleted (and perhaps created again) since the read: read again.
	}
}

// PruneRecords implements backend.Records: it reads at most batch entries
// of the expiry index below olderThan and deletes each record with its
// index entry, in Txns of at most 128 operations, each entry's delete
// guarded by the entry being the one read; then, as Prune does, it
// compacts up to the last delete's revision unless Config.NoCompact.
func (b *Backend) PruneRecords(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	return b.g.PruneRecords(ctx, olderThan, batch, b.pruneRecords)
}

func (b *Backend) pruneRecords(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	if ctx.Err() != nil {
		return 0, backend.NotSent(ctx)
	}
	from := b.prefix + "recx/"
	to, ok := b.recIndexEnd(olderThan)
	if !ok {
		return 0, nil
	}
	resp, err := b.c.Get(ctx, from, clientv3.WithRange(to), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(batch)))
	if err != nil {
		return 0, b.fail(err, "read expired records")
	}
	n, rev, err := b.pruneRecordEntries(ctx, resp.Kvs)
	if err != nil {
		return n, err
	}
	if n > 0 {
		if err := b.compact(ctx, rev); err != nil {
			return n, err
		}
	}
	return n, nil
}

// recIndexEnd is the end of the expiry index's range of instants before
// olderThan; false if that range is empty. A stored Expires (whole ms) is
// before olderThan iff it is below olderThan rounded up to whole ms.
func (b *Backend) recIndexEnd(olderThan time.Time) (string, bool) {
	from := b.prefix + "recx/"
	if !olderThan.After(time.UnixMilli(0)) {
		return "", false
	}
	ms := olderThan.UnixMilli()
	if time.UnixMilli(ms).Before(olderThan) {
		ms++
	}
	if ms >= 1e15 {
		return clientv3.GetPrefixRangeEnd(from), true
	}
	return fmt.Sprintf("%s%015d", from, ms), true
}

// pruneRecordEntries deletes each listed expiry-index entry with its
// record: one Txn per chunk, with a nested Txn per entry that deletes only
// if the entry is still the one read. A record and its entry are written
// and deleted together, so the entry unchanged means the record is the one
// it indexes, not one deleted and created again since. It returns the
// records deleted and the last Txn's revision.
func (b *Backend) pruneRecordEntries(ctx context.Context, entries []*mvccpb.KeyValue) (n int, rev int64, err error) {
	for len(entries) > 0 {
		chunk := entries[:min(len(entries), maxTxnOps/2)]
		entries = entries[len(chunk):]
		var ops []clientv3.Op
		for _, e := range chunk {
			rk, ok := b.parseRecIndexKey(string(e.Key))
			if !ok {
				continue
			}
			ops = append(ops, clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(string(e.Key)), "=", e.ModRevision)},
				[]clientv3.Op{clientv3.OpDelete(rk), clientv3.OpDelete(string(e.Key))},
				nil))
		}
		if len(ops) == 0 {
			continue
		}
		deleted, r, err := b.commitDeletes(ctx, ops, "delete expired records")
		if err != nil {
			return n, rev, err
		}
		n, rev = n+deleted, r
	}
	return n, rev, nil
}

// parseRecIndexKey returns the record key an expiry-index key points at.
func (b *Backend) parseRecIndexKey(k string) (string, bool) {
	rest, ok := strings.CutPrefix(k, b.prefix+"recx/")
	if !ok {
		return "", false
	}
	_, nameSeq, ok := strings.Cut(rest, "/")
	if !ok {
		return "", false
	}
	return b.prefix + "rec/" + nameSeq, true
}
