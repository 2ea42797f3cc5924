package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold/backend"
)

func nopLogger() *zap.Logger { return zap.NewNop() }

// ownerValue is the lock key's value: "<nonce hex> <instance>".
func ownerValue(o backend.Owner) string { return o.Nonce.String() + " " + o.Instance }

func parseOwner(v []byte) (backend.Owner, error) {
	n, inst, ok := strings.Cut(string(v), " ")
	if !ok {
		return backend.Owner{}, fmt.Errorf("malformed owner value %q", v)
	}
	nonce, err := backend.ParseNonce(n)
	if err != nil {
		return backend.Owner{}, fmt.Errorf("malformed owner value %q: %w", v, err)
	}
	return backend.Owner{Instance: inst, Nonce: nonce}, nil
}

// Acquire implements backend.Leases: one Txn that creates the lock key on
// a lease of its own if the key is absent, or returns the holder. The lease
// is an idle one from the pool — used as it is if it was refreshed within
// the slack (the Txn alone), else refreshed by a keep-alive sent in
// parallel with the Txn (one round trip) — or else a new LeaseGrant before
// the Txn.
func (b *Backend) Acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	return b.g.Acquire(ctx, key, owner, ttl, b.acquire)
}

func (b *Backend) acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	secs := ttlSeconds(ttl)
	if x, current, ok := b.pool.take(secs, time.Now()); ok {
		if current {
			// Refreshed within the slack: it outlives the grant's TTL
			// from now without a keep-alive (see pool.go).
			resp, err := b.acquireTxn(ctx, key, owner, x.id)
			switch {
			case err == nil:
				return b.decide(ctx, key, owner, x, resp)
			case errors.Is(err, backend.ErrNotApplied):
				b.unused(x) // never sent: the lease is still idle
				return backend.Grant{}, b.fail(err, "")
			case !errors.Is(err, rpctypes.ErrLeaseNotFound):
				// Unknown outcome: if applied, the retry finds the key and
				// re-sends a keep-alive; Release revokes the untracked lease.
				return backend.Grant{}, b.fail(err, "")
			}
			// Revoked under us (cannot happen while tracked): grant anew.
		} else if g, err, done := b.acquirePooled(ctx, key, owner, x); done {
			return g, err
		}
	}
	if ctx.Err() != nil {
		return backend.Grant{}, notApplied(ctx)
	}
	sent := time.Now()
	lg, err := b.c.Grant(ctx, secs+leaseSlack)
	if err != nil {
		return backend.Grant{}, b.fail(err, "grant a lease")
	}
	x := pooled{id: lg.ID, ttl: lg.TTL, req: secs, fresh: sent}
	resp, err := b.acquireTxn(ctx, key, owner, x.id)
	if err != nil {
		if errors.Is(err, backend.ErrNotApplied) {
			b.unused(x) // never sent: keep the lease for the next Acquire
		}
		// Otherwise an unknown outcome: the lease stays (a retry with the
		// same nonce finds the key if the Txn was applied); it expires on
		// its own.
		return backend.Grant{}, b.fail(err, "")
	}
	return b.decide(ctx, key, owner, x, resp)
}

// acquirePooled runs the Txn on an idle lease while a keep-alive refreshes
// it. done is false when the lease turned out to be gone and a new one must
// be granted.
func (b *Backend) acquirePooled(ctx context.Context, key string, owner backend.Owner, x pooled) (g backend.Grant, err error, done bool) {
	sent := time.Now()
	type kaResult struct {
		ttl int64
		err error
	}
	kac := make(chan kaResult, 1)
	go func() {
		ttl, err := b.kaFor(x.id).keepAlive(ctx, x.id)
		kac <- kaResult{ttl: ttl, err: err}
	}()
	resp, terr := b.acquireTxn(ctx, key, owner, x.id)
	ka := <-kac
	switch {
	case errors.Is(ka.err, rpctypes.ErrLeaseNotFound) || errors.Is(terr, rpctypes.ErrLeaseNotFound):
		// The lease expired: any key put on it is gone with it.
		return backend.Grant{}, nil, false
	case terr != nil:
		if errors.Is(terr, backend.ErrNotApplied) {
			if ka.err == nil {
				x.ttl, x.fresh = ka.ttl, sent
			}
			b.unused(x) // never sent: the lease is still idle
		}
		return backend.Grant{}, b.fail(terr, ""), true
	case ka.err != nil:
		if resp.Succeeded {
			// Ours, but the lease's life is unknown: report an unknown
			// outcome; the retry answers "yours" after a keep-alive.
			x.lock, x.owner = lockRef{key, uint64(resp.Header.Revision)}, owner
			b.pool.hold(x)
			return backend.Grant{}, b.fail(ka.err, "refresh the lease"), true
		}
		g, err := b.decide(ctx, key, owner, pooled{}, resp)
		return g, err, true
	}
	x.ttl, x.fresh = ka.ttl, sent
	g, err = b.decide(ctx, key, owner, x, resp)
	return g, err, true
}

// acquireTxn runs the grant Txn, alone or batched with others (batch.go).
// An error wrapping backend.ErrNotApplied means it was never sent.
func (b *Backend) acquireTxn(ctx context.Context, key string, owner backend.Owner, id clientv3.LeaseID) (*clientv3.TxnResponse, error) {
	lk, ck := b.LockKey(key), b.counterKey(key)
	return b.acq.do(&txnReq{
		ctx: ctx, key: lk,
		cmps: []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(lk), "=", 0)},
		then: []clientv3.Op{clientv3.OpGet(ck), clientv3.OpPut(lk, ownerValue(owner), clientv3.WithLease(id)), clientv3.OpPut(ck, "")},
		els:  []clientv3.Op{clientv3.OpGet(lk)},
	})
}

// unused returns an idle lease to the pool, or revokes it when the pool is
// full (off the caller's path; it would expire anyway).
func (b *Backend) unused(x pooled) {
	if !b.pool.put(x.req, x) {
		go b.revoke(x.id)
	}
}

// decide turns the acquire Txn's answer into a grant or a *HeldError. x is
// the lease the Txn used (zero: do not pool it).
func (b *Backend) decide(ctx context.Context, key string, owner backend.Owner, x pooled, resp *clientv3.TxnResponse) (backend.Grant, error) {
	lk, ck := b.LockKey(key), b.counterKey(key)
	if resp.Succeeded {
		token := uint64(resp.Header.Revision)
		if prev := resp.Responses[0].GetResponseRange().Kvs; len(prev) == 1 && uint64(prev[0].ModRevision) >= token {
			// Revisions went backwards (restored or mirrored data): refuse.
			_, _ = b.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(lk), "=", int64(token))).Then(clientv3.OpDelete(lk)).Commit()
			if x.id != 0 {
				go b.revoke(x.id)
			}
			return backend.Grant{}, fmt.Errorf("revision %d is not above the last token %d recorded in %q: refusing a token that goes backwards",
				token, prev[0].ModRevision, ck)
		}
		if x.id != 0 {
			x.lock, x.owner = lockRef{key, token}, owner
			b.pool.hold(x)
		}
		return backend.Grant{Token: token, TTL: lockTTL(x.ttl)}, nil
	}
	if x.id != 0 && !b.pool.put(x.req, x) { // unused: keep it for the next Acquire
		go b.revoke(x.id)
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		// Cannot happen: the compare and the get see one revision.
		return backend.Grant{}, errors.New("key vanished inside a Txn")
	}
	kv := kvs[0]
	holder, err := parseOwner(kv.Value)
	if err != nil {
		return backend.Grant{}, err
	}
	if holder == owner { // a retry of an applied request: yours
		sent := time.Now()
		ka, err := b.keepAlive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return backend.Grant{}, fmt.Errorf("%w: key %q, token %d expired before the retry", backend.ErrLeaseLost, key, kv.CreateRevision)
			}
			return backend.Grant{}, b.fail(err, "renew the lease on retry")
		}
		b.pool.renewed(clientv3.LeaseID(kv.Lease), sent)
		return backend.Grant{Token: uint64(kv.CreateRevision), TTL: lockTTL(int64(ka / time.Second))}, nil
	}
	l := backend.Lease{Key: key, Owner: holder, Token: uint64(kv.CreateRevision)}
	return backend.Grant{}, &backend.HeldError{Holder: l}
}

// revoke revokes an unused lease, best effort (it expires on its own).
func (b *Backend) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = b.c.Revoke(ctx, id)
}

// held reads the lock key and checks owner+token; it returns the lease id.
func (b *Backend) held(ctx context.Context, key string, owner backend.Owner, token uint64) (*mvccpb.KeyValue, error) {
	resp, err := b.c.Get(ctx, b.LockKey(key))
	if err != nil {
		return nil, b.fail(err, "read the lock key")
	}
	if len(resp.Kvs) == 0 {
		return nil, backend.ErrLeaseLost
	}
	kv := resp.Kvs[0]
	if uint64(kv.CreateRevision) != token || string(kv.Value) != ownerValue(owner) {
		return nil, fmt.Errorf("%w: key %q, token %d: held by another grant (token %d)", backend.ErrLeaseLost, key, token, kv.CreateRevision)
	}
	return kv, nil
}

// Renew implements backend.Leases: a keep-alive of the grant's own lease
// after checking that owner+token still hold the key. The lease's TTL is
// fixed at grant; a different req.TTL is not applied and the lease's TTL is
// returned.
func (b *Backend) Renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	return b.g.Renew(ctx, req, b.renew)
}

func (b *Backend) renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	key, owner, token := req.Key, req.Owner, req.Token
	kv, err := b.held(ctx, key, owner, token)
	if err != nil {
		return backend.Grant{}, err
	}
	sent := time.Now()
	ka, err := b.keepAlive(ctx, clientv3.LeaseID(kv.Lease))
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			b.pool.release(clientv3.LeaseID(kv.Lease))
			return backend.Grant{}, fmt.Errorf("%w: key %q, token %d: lease expired", backend.ErrLeaseLost, key, token)
		}
		return backend.Grant{}, b.fail(err, "")
	}
	b.pool.renewed(clientv3.LeaseID(kv.Lease), sent)
	return backend.Grant{Token: token, TTL: lockTTL(int64(ka / time.Second))}, nil
}

// Release implements backend.Leases: delete guarded by create revision and
// owner; the grant's lease, now idle, goes to the pool (or is revoked). The
// counter key stays. For grants this backend made, the lease id and owner
// are known locally; otherwise the Txn also compares the owner and the
// delete returns the deleted key to learn the lease.
func (b *Backend) Release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	return b.g.Release(ctx, key, owner, token, b.release)
}

func (b *Backend) release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	lk := b.LockKey(key)
	id, granted, known := b.pool.leaseOf(key, token)
	if known && granted != owner {
		return fmt.Errorf("%w: key %q, token %d: not held by this owner", backend.ErrLeaseLost, key, token)
	}
	// A create revision names one grant; for a grant this backend made to
	// owner, comparing it is enough (each compare is a read on the server).
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(lk), "=", int64(token))}
	var opts []clientv3.OpOption
	if !known {
		cmps = append(cmps, clientv3.Compare(clientv3.Value(lk), "=", ownerValue(owner)))
		opts = append(opts, clientv3.WithPrevKV())
	}
	resp, err := b.rel.do(&txnReq{ctx: ctx, key: lk, cmps: cmps, then: []clientv3.Op{clientv3.OpDelete(lk, opts...)}})
	if err != nil {
		return b.fail(err, "")
	}
	if !resp.Succeeded {
		if known {
			b.pool.release(id) // expired or deleted: forget it
		}
		return backend.ErrLeaseLost
	}
	if !known {
		kvs := resp.Responses[0].GetResponseDeleteRange().PrevKvs
		if len(kvs) != 1 {
			return nil
		}
		id = clientv3.LeaseID(kvs[0].Lease)
	}
	// The key is gone and its lease idle: keep it for the next Acquire, or
	// revoke it (off the caller's path; it would expire anyway).
	if x, ok := b.pool.release(id); !ok || !b.pool.put(x.req, x) {
		go b.revoke(id)
	}
	return nil
}

// view turns a lock key into a Lease, asking etcd for the lease's remaining
// TTL. ok is false when the lease has expired (the key awaits revocation).
func (b *Backend) view(ctx context.Context, kv *mvccpb.KeyValue) (backend.Lease, bool, error) {
	o, err := parseOwner(kv.Value)
	if err != nil {
		return backend.Lease{}, false, err
	}
	l := backend.Lease{Key: strings.TrimPrefix(string(kv.Key), b.prefix+"l/"), Owner: o, Token: uint64(kv.CreateRevision)}
	ttl, err := b.c.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return l, false, nil
		}
		return l, false, b.fail(err, fmt.Sprintf("read the lease of key %q", l.Key))
	}
	// etcd reports a lease it has not revoked with its remaining whole
	// seconds, rounded toward zero: 0 is its last second (or one past its
	// expiry that the leader has not revoked yet), while the key, which
	// Acquire compares, still exists. Only -1 (no such lease) is gone.
	if ttl.TTL < 0 {
		return l, false, nil
	}
	// The lease's TTL minus the slack, as grants report it (pool.go); a
	// lease inside its slack is still held, so at least 1 ms.
	l.Remaining = max(time.Duration(ttl.TTL-leaseSlack)*time.Second, time.Millisecond)
	return l, true, nil
}

// Get implements backend.Leases.
func (b *Backend) Get(ctx context.Context, key string) (backend.Lease, error) {
	return b.g.Get(ctx, key, b.get)
}

func (b *Backend) get(ctx context.Context, key string) (backend.Lease, error) {
	resp, err := b.c.Get(ctx, b.LockKey(key))
	if err != nil {
		return backend.Lease{}, b.fail(err, "")
	}
	if len(resp.Kvs) == 0 {
		return backend.Lease{}, backend.ErrNotFound
	}
	l, ok, err := b.view(ctx, resp.Kvs[0])
	if err != nil {
		return backend.Lease{}, err
	}
	if !ok {
		return backend.Lease{}, fmt.Errorf("%w: key %q (lease expired)", backend.ErrNotFound, key)
	}
	return l, nil
}

// List implements backend.Leases. etcd returns keys in byte order, which is
// key order.
func (b *Backend) List(ctx context.Context, prefix string, limit int) ([]backend.Lease, error) {
	return b.g.List(ctx, prefix, limit, b.list)
}

func (b *Backend) list(ctx context.Context, prefix string, limit int) ([]backend.Lease, error) {
	resp, err := b.c.Get(ctx, b.LockKey(prefix), clientv3.WithPrefix())
	if err != nil {
		return nil, b.fail(err, "")
	}
	var out []backend.Lease
	for _, kv := range resp.Kvs {
		l, ok, err := b.view(ctx, kv)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, l)
			if limit > 0 && len(out) == limit {
				break
			}
		}
	}
	return out, nil
}

// Wait implements backend.Notifier: it watches the lock key from the
// revision of its Get + 1 for a delete (release or lease expiry).
func (b *Backend) Wait(ctx context.Context, key string) (<-chan struct{}, error) {
	return b.g.Wait(ctx, key, b.wait)
}

func (b *Backend) wait(ctx context.Context, key string) (<-chan struct{}, error) {
	lk := b.LockKey(key)
	resp, err := b.c.Get(ctx, lk)
	if err != nil {
		return nil, b.fail(err, "get the lock key")
	}
	if len(resp.Kvs) == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch, nil
	}
	return b.waitDelete(ctx, lk, resp.Header.Revision+1), nil
}

// waitDelete watches lk from revision rev for a delete; the channel also
// closes when the watch ends for any other reason (compaction, no leader,
// backend closed, ctx done).
func (b *Backend) waitDelete(ctx context.Context, lk string, rev int64) <-chan struct{} {
	ch := make(chan struct{})
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wc := b.c.Watch(wctx, lk, clientv3.WithRev(rev), clientv3.WithFilterPut())
	go func() {
		defer close(ch)
		defer cancel()
		for {
			select {
			case <-b.done:
				return
			case w, ok := <-wc:
				if !ok || w.Err() != nil || w.Canceled {
					// Closed, compacted (ErrCompacted) or leaderless: the
					// event may be lost, so wake the waiter to re-check.
					return
				}
				for _, ev := range w.Events {
					if ev.Type == clientv3.EventTypeDelete {
						return
					}
				}
			}
		}
	}()
	return ch
}
