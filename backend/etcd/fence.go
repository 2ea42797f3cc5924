package etcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/backend"
)

// FencedPut writes value at target (an etcd key of the caller's, outside
// the backend's prefix or not) only if the lease on key is still the grant
// with token: one Txn `If(create_revision(lockKey) == token) Then
// put(target, value)`. A holder whose lease expired or was taken over gets
// an error wrapping backend.ErrLeaseLost and nothing is written, however
// late it wakes up.
func (b *Backend) FencedPut(ctx context.Context, key string, token uint64, target, value string) error {
	if err := backend.CheckKey("key", key); err != nil {
		return err
	}
	if err := backend.CheckToken(token); err != nil {
		return err
	}
	if target == "" {
		return fmt.Errorf("%w: fenced put target is empty", backend.ErrInvalid)
	}
	if err := b.check(); err != nil {
		return err
	}
	resp, err := b.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(b.LockKey(key)), "=", int64(token))).
		Then(clientv3.OpPut(target, value)).
		Commit()
	if err != nil {
		return b.wrap(err, fmt.Sprintf("fenced put of %q under key %q", target, key))
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: key %q is no longer held with token %d: fenced put of %q rejected", backend.ErrLeaseLost, key, token, target)
	}
	return nil
}
