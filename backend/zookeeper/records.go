package zookeeper

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/recordcodec"
)

// Record store layout (backend.Records), apart from the ledger's /jobs and
// /fin:
//
//	<prefix>/records/<name>/<seq>          the record (JSON: value, owner, expires)
//	<prefix>/records/<name>/<seq>/<nonce>  its creator's mark (empty)
//	<prefix>/records-exp/<hour>/<expires ms>-<name>-<seq>  expiry index (PruneRecords)
//
// <name> is the record name escaped as a key or job name is (escape: one
// path component, distinct names stay distinct), <seq> the sequence number
// as 19-digit zero-padded decimal (so that names sort as numbers),
// <expires ms> 20-digit Unix ms and <hour> its hour ("2006010215", UTC).
// A record, its creator's mark and its index entry (if it has an Expires)
// are created together in one multi-op and deleted together in one, so an
// index entry is there exactly while its record is.
//
// The creator's mark (the owner nonce) guards DeleteRecord: a record never
// changes, so its version cannot tell it from a record created at the same
// place after it was pruned, but the other record's mark has another
// name, and the delete of the mark fails. A name's node goes once its last
// record does (a create that finds it gone makes it again and retries).
//
// Every name's records are children of one node, so a name should keep
// fewer than some 40,000 records at a time (jute.maxbuffer bounds a
// listing to 1 MB); the index is bucketed by hour like the ledger's.

func seq19(seq int64) string { return fmt.Sprintf("%019d", seq) }

func (b *Backend) recordDir(name string) string { return b.prefix + "/records/" + escape(name) }

func (b *Backend) recordPath(name string, seq int64) string {
	return b.recordDir(name) + "/" + seq19(seq)
}

// recordExpPath is the expiry index entry of the record (name, seq) that
// expires at exp (Unix ms).
func (b *Backend) recordExpPath(exp int64, name string, seq int64) string {
	return fmt.Sprintf("%s/records-exp/%s/%020d-%s-%s", b.prefix, hour(time.UnixMilli(exp)), exp, escape(name), seq19(seq))
}

// parseRecordExp returns the expiry (Unix ms) and the record path an index
// entry names.
func (b *Backend) parseRecordExp(entry string) (int64, string, bool) {
	if len(entry) < 20+1+1+1+19 || entry[20] != '-' || entry[len(entry)-20] != '-' {
		return 0, "", false
	}
	exp, err := strconv.ParseInt(entry[:20], 10, 64)
	if err != nil {
		return 0, "", false
	}
	seq := entry[len(entry)-19:]
	if _, err := strconv.ParseInt(seq, 10, 64); err != nil {
		return 0, "", false
	}
	return exp, b.prefix + "/records/" + entry[21:len(entry)-20] + "/" + seq, true
}

// CreateRecord implements backend.Records: one multi-op creates the
// record, its creator's mark and its expiry index entry; when the record
// is there already, it is read and answered.
func (b *Backend) CreateRecord(ctx context.Context, req backend.CreateRecordRequest) (backend.Record, bool, error) {
	return b.g.CreateRecord(ctx, req, b.createRecord)
}

func (b *Backend) createRecord(ctx context.Context, req backend.CreateRecordRequest) (backend.Record, bool, error) {
	dir, rp := b.recordDir(req.Name), b.recordPath(req.Name, req.Seq)
	rec := recordcodec.New(req, false)
	parents := []string{dir}
	ops := []any{
		&zk.CreateRequest{Path: rp, Data: rec.Encode(), Acl: b.acl},
		&zk.CreateRequest{Path: rp + "/" + rec.Nonce, Acl: b.acl},
	}
	if rec.Expires != nil {
		ep := b.recordExpPath(*rec.Expires, req.Name, req.Seq)
		parents = append(parents, ep[:strings.LastIndex(ep, "/")])
		ops = append(ops, &zk.CreateRequest{Path: ep, Acl: b.acl})
	}
	for {
		// Every earlier multi-op of this loop failed whole: nothing is
		// applied yet.
		if ctx.Err() != nil {
			return backend.Record{}, false, backend.NotSent(ctx)
		}
		retry, err := b.multi("", parents, ops...)
		if err != nil {
			return backend.Record{}, false, err
		}
		if !retry {
			return rec.Record(req.Name, req.Seq), true, nil
		}
		// The record is there (or a parent was missing, or the record
		// went since): read it.
		data, _, err := b.conn.Get(rp)
		if err == zk.ErrNoNode {
			continue
		}
		if err != nil {
			return backend.Record{}, false, b.wrap(err, "read the record there")
		}
		there, err := recordcodec.Decode(data)
		if err != nil {
			return backend.Record{}, false, err
		}
		return there.Record(req.Name, req.Seq), there.Owner() == req.Owner, nil
	}
}

// ListRecords implements backend.Records: it lists the name's node and
// reads its records greatest seq first (one deleted since the listing is
// skipped).
func (b *Backend) ListRecords(ctx context.Context, req backend.ListRecordsRequest) ([]backend.Record, error) {
	return b.g.ListRecords(ctx, req, b.listRecords)
}

func (b *Backend) listRecords(ctx context.Context, req backend.ListRecordsRequest) ([]backend.Record, error) {
	if ctx.Err() != nil {
		return nil, backend.NotSent(ctx)
	}
	dir := b.recordDir(req.Name)
	names, err := b.children(dir)
	if err != nil {
		return nil, err
	}
	var seqs []int64
	for _, n := range names {
		seq, err := strconv.ParseInt(n, 10, 64)
		if err != nil || len(n) != 19 || seq < 0 {
			continue
		}
		if req.Before == 0 || seq < req.Before {
			seqs = append(seqs, seq)
		}
	}
	slices.SortFunc(seqs, func(x, y int64) int { return cmp.Compare(y, x) })
	var out []backend.Record
	for _, seq := range seqs {
		if len(out) == req.Limit {
			break
		}
		if ctx.Err() != nil {
			return nil, backend.NotSent(ctx)
		}
		data, _, err := b.conn.Get(dir + "/" + seq19(seq))
		if err == zk.ErrNoNode {
			continue
		}
		if err != nil {
			return nil, b.wrap(err, "read a record")
		}
		r, err := recordcodec.Decode(data)
		if err != nil {
			return nil, err
		}
		out = append(out, r.Record(req.Name, seq))
	}
	return out, nil
}

// DeleteRecord implements backend.Records: it reads the record, and if
// req.Owner created it deletes it with its creator's mark (which makes the
// multi-op fail if another owner's record took the place since) and its
// index entry.
func (b *Backend) DeleteRecord(ctx context.Context, req backend.DeleteRecordRequest) error {
	return b.g.DeleteRecord(ctx, req, b.deleteRecord)
}

func (b *Backend) deleteRecord(ctx context.Context, req backend.DeleteRecordRequest) error {
	dir, rp := b.recordDir(req.Name), b.recordPath(req.Name, req.Seq)
	var failed int64 // the Czxid of the record a multi-op failed to delete
	for {
		// As in createRecord: a failed multi-op applied nothing.
		if ctx.Err() != nil {
			return backend.NotSent(ctx)
		}
		data, st, err := b.conn.Get(rp)
		if err == zk.ErrNoNode {
			return backend.ErrNotFound
		}
		if err != nil {
			return b.wrap(err, "read the record")
		}
		if st.Czxid == failed {
			return incomplete(rp)
		}
		r, err := recordcodec.Decode(data)
		if err != nil {
			return err
		}
		if r.Owner() != req.Owner {
			return backend.ErrNotFound
		}
		ops := []any{
			&zk.DeleteRequest{Path: rp + "/" + r.Nonce, Version: -1},
			&zk.DeleteRequest{Path: rp, Version: -1},
		}
		if r.Expires != nil {
			ops = append(ops, &zk.DeleteRequest{Path: b.recordExpPath(*r.Expires, req.Name, req.Seq), Version: -1})
		}
		retry, err := b.multi("", nil, ops...)
		if err != nil {
			return err
		}
		if !retry {
			_ = b.conn.Delete(dir, -1) // fails while not empty
			return nil
		}
		// Deleted (pruned) since the read, perhaps replaced: read again.
		failed = st.Czxid
	}
}

// PruneRecords implements backend.Records: it walks the expiry index
// oldest first and deletes each record that expired before olderThan with
// its entry, removing hour buckets it empties.
func (b *Backend) PruneRecords(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	return b.g.PruneRecords(ctx, olderThan, batch, b.pruneRecords)
}

func (b *Backend) pruneRecords(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	if ctx.Err() != nil {
		return 0, backend.NotSent(ctx)
	}
	root := b.prefix + "/records-exp"
	hours, err := b.children(root)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, h := range hours {
		if h > hour(olderThan) {
			break
		}
		entries, err := b.children(root + "/" + h)
		if err != nil {
			return n, err
		}
		for _, e := range entries {
			if n == batch {
				return n, nil
			}
			if ctx.Err() != nil {
				return n, fmt.Errorf("%d pruned: %w", n, backend.ContextEnded(ctx))
			}
			exp, rp, ok := b.parseRecordExp(e)
			if !ok || !time.UnixMilli(exp).Before(olderThan) {
				continue
			}
			deleted, err := b.pruneRecord(rp, root+"/"+h+"/"+e, exp)
			if err != nil {
				return n, err
			}
			if deleted {
				n++
				_ = b.conn.Delete(rp[:strings.LastIndex(rp, "/")], -1) // fails while not empty
			}
		}
		_ = b.conn.Delete(root+"/"+h, -1) // fails while not empty
	}
	return n, nil
}

// pruneRecord deletes the record at rp with its creator's mark and the
// index entry, in one multi-op, if the record there expires at exp (the
// entry's); deleted reports that this call deleted it. A record that is
// gone, or that another with another Expires replaced, was the entry's
// and the entry went with it.
func (b *Backend) pruneRecord(rp, entry string, exp int64) (deleted bool, err error) {
	var failed int64 // as in deleteRecord
	for {
		data, st, err := b.conn.Get(rp)
		if err == zk.ErrNoNode {
			return false, nil
		}
		if err != nil {
			return false, b.wrap(err, "read "+rp)
		}
		if st.Czxid == failed {
			return false, incomplete(rp)
		}
		r, err := recordcodec.Decode(data)
		if err != nil {
			return false, err
		}
		if r.Expires == nil || *r.Expires != exp {
			return false, nil
		}
		retry, err := b.multi("prune "+rp, nil,
			&zk.DeleteRequest{Path: rp + "/" + r.Nonce, Version: -1},
			&zk.DeleteRequest{Path: rp, Version: -1},
			&zk.DeleteRequest{Path: entry, Version: -1})
		if err != nil {
			return false, err
		}
		if !retry {
			return true, nil
		}
		failed = st.Czxid
	}
}

// incomplete is the error of a delete whose multi-op failed while the
// record stayed as read (the same Czxid): its creator's mark or index
// entry is missing, or it has another child — nodes this backend did not
// write as one — and a retry would fail alike.
func incomplete(rp string) error {
	return fmt.Errorf("record %s lacks its creator's mark or index entry, or has other children: not written by this backend, delete it by hand", rp)
}
