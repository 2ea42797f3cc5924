package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Prune implements backend.Ledger: it reads at most batch entries of the
// finished-runs index older than olderThan and deletes each run with its
// index entry, in Txns of at most 128 operations; then it compacts up to the
// last delete's revision unless Config.NoCompact.
func (b *Backend) Prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	return b.g.Prune(ctx, olderThan, batch, b.prune)
}

func (b *Backend) prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	entries, read, err := b.finishedBefore(ctx, olderThan, batch)
	if err != nil {
		return 0, err
	}
	n, rev, err := b.pruneEntries(ctx, entries, read)
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

// compact compacts up to rev (the revision of a prune's last delete)
// unless Config.NoCompact; already compacted further is fine.
func (b *Backend) compact(ctx context.Context, rev int64) error {
	if b.cfg.NoCompact {
		return nil
	}
	if _, err := b.c.Compact(ctx, rev); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return b.fail(err, fmt.Sprintf("compact to revision %d", rev))
	}
	return nil
}

// finishedBefore lists at most batch keys of the finished-runs index older
// than olderThan, and the revision it read them at.
func (b *Backend) finishedBefore(ctx context.Context, olderThan time.Time, batch int) (keys []string, read int64, err error) {
	from := b.prefix + "f/"
	to := fmt.Sprintf("%sf/%020d", b.prefix, max(olderThan.UnixNano(), 0))
	resp, err := b.c.Get(ctx, from, clientv3.WithRange(to), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(batch)))
	if err != nil {
		return nil, 0, b.fail(err, "read finished runs")
	}
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys, resp.Header.Revision, nil
}

// pruneEntries deletes each listed index entry and, if it is still the run
// the entry indexes, its run: one Txn per chunk, with a nested Txn per entry
// that deletes the run only if it was not written after the listing (read,
// the revision the entries were read at). A finished run never changes, so
// a later write means that another Prune deleted it and a claim made the
// occurrence's record again, running — deleting that one let a third claim
// win the occurrence beside its runner. It returns the runs deleted and the
// last Txn's revision.
func (b *Backend) pruneEntries(ctx context.Context, entries []string, read int64) (n int, rev int64, err error) {
	for len(entries) > 0 {
		chunk := entries[:min(len(entries), maxTxnOps/2)]
		entries = entries[len(chunk):]
		var ops []clientv3.Op
		for _, fk := range chunk {
			rk, ok := b.parseFinKey(fk)
			if !ok {
				continue
			}
			ops = append(ops, clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(rk), "<", read+1)},
				[]clientv3.Op{clientv3.OpDelete(rk), clientv3.OpDelete(fk)},
				[]clientv3.Op{clientv3.OpDelete(fk)}))
		}
		deleted, r, err := b.commitDeletes(ctx, ops, "delete finished runs")
		if err != nil {
			return n, rev, err
		}
		n, rev = n+deleted, r
	}
	return n, rev, nil
}

// commitDeletes commits ops, each a guarded Txn whose first Then op is
// the delete that counts, in one Txn: it returns how many the succeeded
// ones deleted and the revision of the commit. what names a failure.
func (b *Backend) commitDeletes(ctx context.Context, ops []clientv3.Op, what string) (int, int64, error) {
	tr, err := b.c.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return 0, 0, b.fail(err, what)
	}
	n := 0
	for _, r := range tr.Responses {
		if t := r.GetResponseTxn(); t != nil && t.Succeeded {
			n += int(t.Responses[0].GetResponseDeleteRange().Deleted)
		}
	}
	return n, tr.Header.Revision, nil
}
