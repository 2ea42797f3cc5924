package etcd

import (
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/backend"
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
//
// Slack instead of a keep-alive per acquire: lock leases are granted with
// leaseSlack seconds more than the TTL the caller asked for, and grants
// report the etcd TTL minus the slack (never less than asked). A pooled
// lease whose last grant or keep-alive was SENT at most leaseSlack −
// slackMargin ago still lives at least the reported TTL from the new
// Acquire's send time, so that Acquire needs no keep-alive: its Txn alone,
// one RPC, as with a session-shared lease. Older pooled leases get the
// parallel keep-alive above. The price: a holder that dies leaves its key
// for up to TTL + leaseSlack (by etcd's clock) instead of TTL.

const (
	poolMargin = 750 * time.Millisecond
	poolMax    = 64 // idle leases kept per TTL; more are revoked

	leaseSlack  = 1 // seconds added to every lock lease
	slackMargin = 200 * time.Millisecond
)

// lockTTL is the TTL a lock grant reports for a lock lease whose etcd TTL
// is secs: the slack taken off.
func lockTTL(secs int64) time.Duration {
	return time.Duration(max(secs-leaseSlack, 1)) * time.Second
}

type pooled struct {
	id    clientv3.LeaseID
	ttl   int64     // granted seconds
	req   int64     // requested seconds (the pool bucket)
	fresh time.Time // send time of the last grant or keep-alive
	lock  lockRef   // the grant it is attached to, while in use
	owner backend.Owner
}

// lockRef names one grant: a lock key and its token.
type lockRef struct {
	key   string
	token uint64
}

type leasePool struct {
	mu    sync.Mutex
	free  map[int64][]pooled          // requested seconds → idle leases
	inUse map[clientv3.LeaseID]pooled // leases attached to a key we granted
	grant map[lockRef]pooled          // the same, by grant
}

func newLeasePool() *leasePool {
	return &leasePool{free: map[int64][]pooled{}, inUse: map[clientv3.LeaseID]pooled{}, grant: map[lockRef]pooled{}}
}

// take returns an idle lease for secs that is fresh enough, dropping stale
// ones (they expire on their own). current reports that the lease needs no
// keep-alive: its last refresh was sent within leaseSlack − slackMargin.
func (p *leasePool) take(secs int64, now time.Time) (x pooled, current, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := p.free[secs]; len(l) > 0; l = p.free[secs] {
		x := l[len(l)-1]
		p.free[secs] = l[:len(l)-1]
		if x.fresh.Add(time.Duration(x.ttl)*time.Second - poolMargin).After(now) {
			return x, now.Sub(x.fresh) <= leaseSlack*time.Second-slackMargin, true
		}
	}
	return pooled{}, false, false
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
	if x.lock != (lockRef{}) {
		p.grant[x.lock] = x
	}
}

// leaseOf is the lease and owner of a grant this backend made and still
// tracks.
func (p *leasePool) leaseOf(key string, token uint64) (clientv3.LeaseID, backend.Owner, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	x, ok := p.grant[lockRef{key, token}]
	return x.id, x.owner, ok
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
	if ok && p.grant[x.lock].id == id {
		delete(p.grant, x.lock)
	}
	x.lock, x.owner = lockRef{}, backend.Owner{}
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
