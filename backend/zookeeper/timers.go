package zookeeper

import (
	"context"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/backend"
)

// TTL timers, and the records of the nodes this backend created or may
// have created. The rule they keep: no ephemeral node this backend may have
// created lives untimed — each is kept alive by a grant's timer, timed for
// deletion, or deleted — so none outlives its TTL by the session's life.

// timerKey names one TTL timer: a node path and the data the node must
// still hold for the timer to delete it ("" for lock nodes, whose paths are
// never reused; a runner's lease path is reused by reclaims, so its timer is
// its owner's value).
type timerKey struct{ path, want string }

// armAt (re)starts the TTL deletion of an ephemeral node this backend
// created: at deadline, unless armed again, the node is deleted if it still
// holds want (nil: any data). A deadline counts from the send time of the
// request that created or renewed the node.
func (b *Backend) armAt(path string, want []byte, deadline time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armLocked(timerKey{path, string(want)}, deadline)
}

// extend moves the TTL deletion of path (holding want) to deadline if a
// timer still keeps it alive, and reports whether one did. A request that
// renews a node calls it before it is sent, not after its reply: a timer
// left to fire while the renewal is in flight would delete the node the
// renewal kept, under a holder told its lease runs to the renewal's send
// time + TTL. A renewal that then fails leaves the node timed later than
// the holder counts, which delays the next holder and never overlaps it.
func (b *Backend) extend(path string, want []byte, deadline time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := timerKey{path, string(want)}
	if b.timers[k] == nil {
		return false
	}
	b.armLocked(k, deadline)
	return true
}

// settleArm is settle's armAt of a lock node, unless a timer already keeps
// it alive; it counts the node as taken on by name (see armGrant).
func (b *Backend) settleArm(path string, deadline time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timers[timerKey{path: path}] == nil {
		b.armLocked(timerKey{path: path}, deadline)
		b.byName++
	}
}

// withdrawable reports whether a withdrawal may delete the lock node at
// path: not while a timer keeps it alive (a grant's — a retry by the same
// owner was granted it — or settle's, which deletes it by its deadline).
// If it may, the node is counted as taken on by name (see armGrant).
func (b *Backend) withdrawable(path string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timers[timerKey{path: path}] != nil {
		return false
	}
	b.byName++
	return true
}

// byNameSoFar returns how many lock nodes the background cleanups, which
// find an owner's nodes by name, have timed (settle) or set out to delete
// (withdraw). A grant reads it before it creates its node and passes it to
// armGrant.
func (b *Backend) byNameSoFar() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byName
}

// armGrant arms the TTL deletion of the lock node at path, about to be
// granted, and reports whether a background cleanup took on a node by name
// since the grant read since (byNameSoFar, before its create): then it may
// have been this very node (the cleanups go by the owner's protected name,
// which a retry's node carries too) — timed by a deadline that may have
// passed, so its timer's expire may have deleted it or be about to, or
// about to be deleted by a withdrawal. The caller must then confirm the
// node with a write before it grants it (see Acquire). Arming and reading
// the count under one lock is what makes "no change" mean that no cleanup
// touched a node created after since was read.
func (b *Backend) armGrant(path string, deadline time.Time, since uint64) (confirm bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armLocked(timerKey{path: path}, deadline)
	return b.byName != since
}

// armLocked arms k; b.mu is held.
func (b *Backend) armLocked(k timerKey, deadline time.Time) {
	if b.closed {
		return
	}
	if t := b.timers[k]; t != nil {
		t.Stop()
	}
	var t *time.Timer
	t = time.AfterFunc(time.Until(deadline), func() {
		b.mu.Lock()
		if b.timers[k] != t {
			b.mu.Unlock()
			return
		}
		delete(b.timers, k)
		b.forget(k.path)
		b.mu.Unlock()
		b.expire(k)
	})
	b.timers[k] = t
}

// expire deletes the node of a timer that fired. A connection error does
// not end it (a short outage must not leave the node to live as long as the
// session): it retries until the node is gone, holds other data, is armed
// again, or the backend is closed — closing the session deletes the node;
// so does the session's expiry, after which the node is not found.
func (b *Backend) expire(k timerKey) {
	pause := 10 * time.Millisecond
	for {
		data, st, err := b.conn.Get(k.path)
		if err == zk.ErrNoNode {
			return
		}
		if err == nil {
			if k.want != "" && string(data) != k.want {
				return
			}
			// Armed again before this read: a renewal may have been
			// written already (it extends before it sends), and the
			// version read is then its version; deleting would remove the
			// node under it. Armed after the read: its write changes the
			// version, and the delete fails.
			if b.armed(k.path, []byte(k.want)) {
				return
			}
			if err = b.conn.Delete(k.path, st.Version); err == nil || err == zk.ErrNoNode {
				return
			}
		}
		if sleepCtx(context.Background(), b.done, pause) != nil {
			return
		}
		pause = min(pause*2, time.Second)
		b.mu.Lock()
		again := b.timers[k] != nil
		b.mu.Unlock()
		if again {
			return // armed again: that timer deletes it
		}
	}
}

// disarm stops the TTL deletion of path (holding want) and forgets its
// grant.
func (b *Backend) disarm(path string, want []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := timerKey{path, string(want)}
	if t := b.timers[k]; t != nil {
		t.Stop()
		delete(b.timers, k)
	}
	b.forget(path)
}

// armed reports whether this backend keeps path (holding want) alive.
func (b *Backend) armed(path string, want []byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.timers[timerKey{path, string(want)}] != nil
}

// forget drops the grant of path; b.mu is held.
func (b *Backend) forget(path string) {
	if r, ok := b.grantAt[path]; ok {
		if b.grantBy[b.grants[r].owner.Nonce] == r {
			delete(b.grantBy, b.grants[r].owner.Nonce)
		}
		delete(b.grants, r)
		delete(b.grantAt, path)
	}
}

// grantRef names one lock grant: key and token.
type grantRef struct {
	key   string
	token uint64
}

type grantRec struct {
	path  string
	owner backend.Owner
}

// track records a lock grant this backend made, so Release needs no lookup.
func (b *Backend) track(key string, token uint64, path string, owner backend.Owner) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.grants[grantRef{key, token}] = grantRec{path: path, owner: owner}
	b.grantAt[path] = grantRef{key, token}
	b.grantBy[owner.Nonce] = grantRef{key, token}
}

// grantOf returns the grant on key this backend made to owner and keeps
// alive: an Acquire retried after its reply was lost answers with it.
func (b *Backend) grantOf(key string, owner backend.Owner) (path string, token uint64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.grantBy[owner.Nonce]
	if !ok || r.key != key || b.grants[r].owner != owner || b.timers[timerKey{path: b.grants[r].path}] == nil {
		return "", 0, false
	}
	return b.grants[r].path, r.token, true
}

// tracked returns the path and owner of a grant this backend made.
func (b *Backend) tracked(key string, token uint64) (string, backend.Owner, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.grants[grantRef{key, token}]
	return r.path, r.owner, ok
}

// maxUnsure bounds the owners remembered as unsure; past it every Acquire
// lists the queue first (the safe, slower path).
const maxUnsure = 4096

// unsureRec is an owner nonce whose create (or withdrawal) had an unknown
// outcome: since is the earliest such request's send time, ttl the TTL it
// asked for, gen counts the marks (settle clears only what it saw).
type unsureRec struct {
	since time.Time
	ttl   time.Duration
	gen   int
}

// unsure reports whether an earlier Acquire by this owner nonce may have
// left a node: then the queue must be searched for it before creating.
func (b *Backend) unsure(n backend.Nonce) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.unsureOf[n]
	return ok || len(b.unsureOf) >= maxUnsure
}

// markUnsure records that a request sent at sent by owner n, for a grant
// of ttl, may have left a node.
func (b *Backend) markUnsure(n backend.Nonce, sent time.Time, ttl time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.unsureOf[n]
	if !ok || sent.Before(r.since) {
		r.since = sent
	}
	r.ttl = max(r.ttl, ttl)
	r.gen++
	b.unsureOf[n] = r
}

func (b *Backend) clearUnsure(n backend.Nonce) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.unsureOf, n)
}

// settle starts, in the background, the search for the nodes a try Acquire
// by owner may have left in key's queue (its create or withdrawal had an
// unknown outcome, and its caller may never retry): each node with owner's
// protected name that no timer keeps alive gets one, due at the TTL counted
// from the earliest unknown request's send time — the holder's deadline
// for such a grant is counted from that send time too. A waiter node so
// timed is deleted at that deadline at the latest; a retry that finds it
// lowest owns and re-arms it; one that finds it behind a holder deletes it.
// The queue is searched twice, at once and at the deadline (a create
// applied late is found then, and deleted at once). Listing failures are
// retried until the backend is closed; after a session expiry nothing is
// found.
func (b *Backend) settle(key string, owner backend.Owner) {
	b.mu.Lock()
	if b.closed || b.settling[owner.Nonce] {
		b.mu.Unlock()
		return
	}
	b.settling[owner.Nonce] = true
	b.mu.Unlock()
	go func() {
		defer func() {
			b.mu.Lock()
			delete(b.settling, owner.Nonce)
			b.mu.Unlock()
		}()
		for {
			b.mu.Lock()
			r, ok := b.unsureOf[owner.Nonce]
			b.mu.Unlock()
			if !ok {
				return // a retry found the outcome
			}
			deadline := r.since.Add(r.ttl)
			if !b.settlePass(key, owner, deadline) {
				return
			}
			if sleepCtx(context.Background(), b.done, time.Until(deadline)) != nil || !b.settlePass(key, owner, deadline) {
				return
			}
			b.mu.Lock()
			now, ok := b.unsureOf[owner.Nonce]
			if ok && now.gen == r.gen {
				delete(b.unsureOf, owner.Nonce)
			}
			b.mu.Unlock()
			if !ok || now.gen == r.gen {
				return
			}
		}
	}()
}

// settlePass times owner's untimed nodes in key's queue, retrying until the
// listing succeeds; false if the backend was closed first.
func (b *Backend) settlePass(key string, owner backend.Owner, deadline time.Time) bool {
	dir := b.lockDir(key)
	for pause := 10 * time.Millisecond; ; pause = min(pause*2, time.Second) {
		b.hooks.onSettleList(key, owner)
		q, err := b.syncedQueue(key)
		if err == nil {
			for _, n := range q {
				if strings.HasPrefix(n, nodeName(owner)) {
					b.settleArm(dir+"/"+n, deadline)
				}
			}
			return true
		}
		if sleepCtx(context.Background(), b.done, pause) != nil {
			return false
		}
	}
}

// syncedQueue lists key's queue after a sync: on an ensemble, the server
// this session reads from then has every write the leader committed before
// the sync, so a node created by a request whose reply was lost is seen.
func (b *Backend) syncedQueue(key string) ([]string, error) {
	if _, err := b.conn.Sync(b.lockDir(key)); err != nil && err != zk.ErrNoNode {
		return nil, b.wrap(err, "sync the queue of key "+key)
	}
	return b.queue(key)
}
