package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/backend"
)

// Prune implements backend.Ledger: it reads at most batch entries of the
// finished-runs index older than olderThan and deletes each run with its
// index entry, in Txns of at most 128 operations; then it compacts up to the
// last delete's revision unless Config.NoCompact.
func (b *Backend) Prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	if err := backend.CheckPrune(olderThan, batch); err != nil {
		return 0, err
	}
	if err := b.check(); err != nil {
		return 0, err
	}
	from := b.prefix + "f/"
	to := fmt.Sprintf("%sf/%020d", b.prefix, max(olderThan.UnixNano(), 0))
	resp, err := b.c.Get(ctx, from, clientv3.WithRange(to), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(batch)))
	if err != nil {
		return 0, b.wrap(err, "read finished runs")
	}
	n := 0
	var rev int64
	kvs := resp.Kvs
	for len(kvs) > 0 {
		chunk := kvs[:min(len(kvs), maxTxnOps/2)]
		kvs = kvs[len(chunk):]
		var ops []clientv3.Op
		for _, kv := range chunk {
			rk, ok := b.parseFinKey(string(kv.Key))
			if !ok {
				continue
			}
			ops = append(ops, clientv3.OpDelete(rk), clientv3.OpDelete(string(kv.Key)))
		}
		tr, err := b.c.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return n, b.wrap(err, "prune finished runs")
		}
		for i := 0; i < len(tr.Responses); i += 2 {
			n += int(tr.Responses[i].GetResponseDeleteRange().Deleted)
		}
		rev = tr.Header.Revision
	}
	if n > 0 && !b.cfg.NoCompact {
		if _, err := b.c.Compact(ctx, rev); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
			return n, b.wrap(err, fmt.Sprintf("compact to revision %d", rev))
		}
	}
	return n, nil
}
