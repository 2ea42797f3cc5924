package etcd

import (
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Lease reuse. A lease is attached to at most one lock key at a time (lease
// per grant). When Release deletes the key, the lease is idle and still
// alive; instead of revoking it (a Raft write) and granting a new one for
// the next Acquire (another Raft write), the backend keeps it in a pool
// and the next Acquire with the same TTL sends a keep-alive for it (served
// by the leader without a Raft write) together with its Txn, in parallel:
// one round trip of latency. The grant is valid only if the keep-alive
// succeeded; the lease then lives at least its TTL from the keep-alive's
// arrival, which is after the caller's send time.
//
// A pooled lease is used only while its remaining life, counted from the
// send time of its last grant or keep-alive, exceeds poolMargin, so that it
// cannot expire between the Txn and the keep-alive.

const (
	poolMargin = 750 * time.Millisecond
	poolMax    = 64 // idle leases kept per TTL; more are revoked
)

type pooled struct {
	id    clientv3.LeaseID
	ttl   int64     // granted seconds
	req   int64     // requested seconds (the pool bucket)
	fresh time.Time // send time of the last grant or keep-alive
}

type leasePool struct {
	mu    sync.Mutex
	free  map[int64][]pooled          // requested seconds → idle leases
	inUse map[clientv3.LeaseID]pooled // leases attached to a key we granted
}

func newLeasePool() *leasePool {
	return &leasePool{free: map[int64][]pooled{}, inUse: map[clientv3.LeaseID]pooled{}}
}

// take returns an idle lease for secs that is fresh enough, dropping stale
// ones (they expire on their own).
func (p *leasePool) take(secs int64, now time.Time) (pooled, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := p.free[secs]; len(l) > 0; l = p.free[secs] {
		x := l[len(l)-1]
		p.free[secs] = l[:len(l)-1]
		if x.fresh.Add(time.Duration(x.ttl)*time.Second - poolMargin).After(now) {
			return x, true
		}
	}
	return pooled{}, false
}

// put returns an idle lease to the pool; false means the pool is full and
// the caller should revoke it.
func (p *leasePool) put(secs int64, x pooled) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free[secs]) >= poolMax {
		return false
	}
	p.free[secs] = append(p.free[secs], x)
	return true
}

// hold records that x is attached to a key granted by this backend.
func (p *leasePool) hold(x pooled) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inUse[x.id] = x
}

// renewed records a successful keep-alive sent at sent.
func (p *leasePool) renewed(id clientv3.LeaseID, sent time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if x, ok := p.inUse[id]; ok && sent.After(x.fresh) {
		x.fresh = sent
		p.inUse[id] = x
	}
}

// release detaches id from its key; ok is false for a lease this backend
// did not grant (or no longer tracks).
func (p *leasePool) release(id clientv3.LeaseID) (pooled, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	x, ok := p.inUse[id]
	delete(p.inUse, id)
	return x, ok
}

// drain empties the pool, returning every idle lease.
func (p *leasePool) drain() []clientv3.LeaseID {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []clientv3.LeaseID
	for s, l := range p.free {
		for _, x := range l {
			ids = append(ids, x.id)
		}
		delete(p.free, s)
	}
	return ids
}
