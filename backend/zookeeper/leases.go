package zookeeper

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/backend"
)

const protectedPrefix = "_c_"

// escape makes a key or job name one path component: "/" and other
// reserved bytes are %-escaped, and a leading "k" rules out "." and "..".
func escape(s string) string { return "k" + url.QueryEscape(s) }

func unescape(c string) (string, bool) {
	s, err := url.QueryUnescape(strings.TrimPrefix(c, "k"))
	return s, err == nil && strings.HasPrefix(c, "k")
}

func (b *Backend) lockDir(key string) string { return b.prefix + "/locks/" + escape(key) }

// nodeName is the protected name prefix of an owner's lock node; the server
// appends the sequence number.
func nodeName(o backend.Owner) string { return protectedPrefix + o.Nonce.String() + "-lock-" }

// nodeData is a lock node's data: the instance name and the granted TTL in
// milliseconds (for Lease.Remaining).
func nodeData(o backend.Owner, granted time.Duration) []byte {
	return []byte(o.Instance + "\n" + fmt.Sprint(granted.Milliseconds()))
}

// seq is the sequence number at the end of a lock node name.
func seq(name string) string { return name[len(name)-10:] }

// queue lists a key's lock nodes in sequence order.
func (b *Backend) queue(key string) ([]string, error) {
	names, _, err := b.conn.Children(b.lockDir(key))
	if err == zk.ErrNoNode {
		return nil, nil
	}
	if err != nil {
		return nil, b.wrap(err, fmt.Sprintf("list the queue of key %q", key))
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, protectedPrefix) && len(n) > len(protectedPrefix)+32+10 {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return seq(out[i]) < seq(out[j]) })
	return out, nil
}

// lease reads a lock node: owner from its name and data, token from czxid.
func (b *Backend) lease(key, name string) (backend.Lease, *zk.Stat, error) {
	data, st, err := b.conn.Get(b.lockDir(key) + "/" + name)
	if err != nil {
		return backend.Lease{}, nil, err
	}
	nonce, err := backend.ParseNonce(name[len(protectedPrefix) : len(protectedPrefix)+32])
	if err != nil {
		return backend.Lease{}, nil, err
	}
	inst, ttlms, _ := strings.Cut(string(data), "\n")
	l := backend.Lease{Key: key, Owner: backend.Owner{Instance: inst, Nonce: nonce}, Token: uint64(st.Czxid)}
	var ms int64
	fmt.Sscan(ttlms, &ms)
	// Information only: TTL since the last write (Renew), on mixed clocks.
	rem := time.Duration(ms)*time.Millisecond - time.Since(time.UnixMilli(st.Mtime))
	l.Remaining = min(max(rem, time.Millisecond), time.Duration(ms)*time.Millisecond)
	return l, st, nil
}

// Acquire implements backend.Leases (a try; see the package doc): create
// the owner's protected ephemeral sequential node, then list the queue and
// read the node's stat at once (two requests pipelined on the session). The
// grant is the node's: its czxid is the token. The queue is listed before
// the create only when an earlier attempt with this owner nonce may have
// left a node (its outcome was unknown), so that the retry finds and owns it.
// It returns when ctx ends, the outcome unknown (see bounded).
func (b *Backend) Acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	return b.g.Acquire(ctx, key, owner, ttl, b.acquire)
}

func (b *Backend) acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	if ctx.Err() != nil {
		return backend.Grant{}, backend.NotSent(ctx)
	}
	if err := b.waitAbandoned(ctx, owner.Nonce); err != nil {
		return backend.Grant{}, err
	}
	sent := time.Now()
	g := b.grantTTL(ttl)
	var (
		grant backend.Grant
		err   error
	)
	if b.bounded(ctx, owner.Nonce, func() { grant, err = b.acquireReqs(key, owner, g, sent) }) {
		return grant, err
	}
	// Unknown outcome, as after a create whose reply was lost: a retry
	// lists first, and settle finds and times a node the create leaves
	// (the abandoned call also goes on and handles its own result).
	b.markUnsure(owner.Nonce, sent, g)
	b.settle(key, owner)
	return backend.Grant{}, unknownOutcome(ctx)
}

// acquireReqs is Acquire's requests, for a grant of g, timed from sent.
func (b *Backend) acquireReqs(key string, owner backend.Owner, g time.Duration, sent time.Time) (backend.Grant, error) {
	dir := b.lockDir(key)
	if path, token, ok := b.grantOf(key, owner); ok {
		// A retry of a grant made here: yours, if its node still exists.
		// A write renews it: it goes through the leader, so on an ensemble
		// a follower that lags (or was cut off from) the leader cannot
		// answer from state older than the retry; it proves the session
		// alive after this call's send time; and its mtime restarts the TTL
		// that Get reports, as the timer restarts from the send time.
		if !b.extend(path, nil, sent.Add(g)) {
			return backend.Grant{}, fmt.Errorf("%w: key %q, token %d: its TTL ran out before the retry", backend.ErrLeaseLost, key, token)
		}
		st, err := b.conn.Set(path, nodeData(owner, g), -1)
		if err == zk.ErrNoNode {
			b.disarm(path, nil)
			return backend.Grant{}, fmt.Errorf("%w: key %q, token %d: gone before the retry", backend.ErrLeaseLost, key, token)
		}
		if err != nil {
			return backend.Grant{}, b.wrap(err, "")
		}
		if uint64(st.Czxid) != token || st.EphemeralOwner != b.conn.SessionID() {
			b.disarm(path, nil)
			return backend.Grant{}, fmt.Errorf("%w: key %q, token %d: gone before the retry", backend.ErrLeaseLost, key, token)
		}
		return backend.Grant{Token: token, TTL: g}, nil
	}
	byName := b.byNameSoFar() // before the create: see armGrant
	mine, found, st, q, err := b.enter(key, owner, g, sent)
	if err != nil {
		if b.unsure(owner.Nonce) {
			// The caller may give up without a retry: find and time the
			// node the create may have left (a waiter behind a holder
			// would otherwise become an untimed holder).
			b.settle(key, owner)
		}
		return backend.Grant{}, err
	}
	path := dir + "/" + mine
	if len(q) == 0 || q[0] != mine || st == nil {
		// A predecessor holds the key (or our node is gone): withdraw.
		if derr := b.conn.Delete(path, -1); derr != nil && derr != zk.ErrNoNode {
			b.markUnsure(owner.Nonce, sent, g)
			b.settle(key, owner)
		} else {
			b.clearUnsure(owner.Nonce)
			b.disarm(path, nil)
		}
		// The holder is the lowest node, and only that one: a later node
		// is a waiter withdrawing as we do, not a holder (the chaos
		// checker caught answers that named one).
		if len(q) > 0 && q[0] != mine {
			if l, _, err := b.lease(key, q[0]); err == nil {
				return backend.Grant{}, &backend.HeldError{Holder: l}
			}
		}
		return backend.Grant{}, fmt.Errorf("zookeeper: acquire key %q: the queue changed, try again: %w", key, backend.ErrLeaseHeld)
	}
	// Ours is the lowest: granted. The session was alive when the create
	// (and the reads) arrived, after this call's send time, so the session
	// cannot expire before send time + timeout ≥ send time + g.
	if st.EphemeralOwner != b.conn.SessionID() {
		return backend.Grant{}, fmt.Errorf("%w: key %q is held by owner %s through another session", backend.ErrLeaseLost, key, owner.Instance)
	}
	b.hooks.onBeforeGrant(path)
	// Granted only if the node exists once this call has armed it. Timed
	// from this send time before any write is sent (see extend): an
	// earlier timer must not fire under the grant.
	//
	// Something of this backend's but this call may have been after the
	// node: the timer of an earlier attempt, for a node it found; or a
	// background cleanup that finds an owner's nodes by name, a retry's
	// fresh node too — settle (after an unknown outcome of this owner's
	// earlier attempt) times each untimed one by that attempt's deadline,
	// which may have passed, and a queued acquire's withdrawal deletes
	// each one no timer keeps. Such a timer's expire, and the withdrawal,
	// delete the node unless they find it armed; either may find it
	// unarmed just before the arm above and delete it just after, so no
	// read after the arm proves the node kept (the chaos checker caught a
	// retry answered OK for a node settle had deleted, and the next owner
	// granted too). A write sent after the arm does: both delete only with
	// the version they read before they found the node unarmed, which the
	// write changes, so either they saw the arm and keep the node, or their
	// delete and the write conflict on that version and only one is
	// applied — a deleted node fails the write (no grant), a written one
	// fails the delete. The write is sent for a node found (it answers
	// "yours", and renews it so that Get's remaining time restarts too)
	// and for a fresh one only if a cleanup took on a node by name since
	// this call's create (armGrant): the common Acquire stays a create and
	// one pipelined read.
	if b.armGrant(path, sent.Add(g), byName) || found {
		if err := b.setOwn(path, nodeData(owner, g), nil, st.Version); err != nil {
			if err == zk.ErrNoNode || err == zk.ErrBadVersion {
				b.disarm(path, nil)
				what := "its node was deleted before the grant (by the cleanup of an earlier attempt of this owner whose outcome was unknown)"
				if found {
					what = "the earlier attempt's node went before the retry"
				}
				return backend.Grant{}, fmt.Errorf("%w: key %q: %s", backend.ErrLeaseLost, key, what)
			}
			// Unknown outcome: the node stays timed by this call; a retry
			// lists first, finds it and answers "yours".
			b.markUnsure(owner.Nonce, sent, g)
			return backend.Grant{}, b.wrapSent(err, "")
		}
	}
	b.clearUnsure(owner.Nonce)
	b.track(key, uint64(st.Czxid), path, owner)
	return backend.Grant{Token: uint64(st.Czxid), TTL: g}, nil
}

// enter puts owner's protected ephemeral sequential node in key's queue,
// or finds the node an earlier attempt with this owner nonce may have left
// (its outcome was unknown), then lists the queue and reads the node's stat
// at once (two requests pipelined on the session). st is nil if the node is
// gone; found reports that the node is an earlier attempt's. On an error
// the owner is marked unsure (with sent, the send time of
// the caller's request): a retry lists first. An error after the create was
// sent does not wrap ErrClosed: the create may have been applied.
func (b *Backend) enter(key string, owner backend.Owner, g time.Duration, sent time.Time) (mine string, found bool, st *zk.Stat, q []string, err error) {
	dir := b.lockDir(key)
	if b.unsure(owner.Nonce) {
		q, err := b.syncedQueue(key)
		if err != nil {
			return "", false, nil, nil, err
		}
		for _, n := range q { // a retry: our earlier create was applied
			if strings.HasPrefix(n, nodeName(owner)) {
				mine, found = n, true
			}
		}
	}
	for mine == "" {
		p, err := b.conn.Create(dir+"/"+nodeName(owner), nodeData(owner, g), zk.FlagEphemeral|zk.FlagSequence, b.acl)
		if err == zk.ErrNoNode {
			if _, err := b.conn.CreateContainer(dir, nil, zk.FlagContainer, b.acl); err != nil && err != zk.ErrNodeExists {
				return "", false, nil, nil, b.wrap(err, fmt.Sprintf("create the queue of key %q", key))
			}
			continue
		}
		if err != nil {
			// Unknown outcome: a retry with this nonce finds the node.
			b.markUnsure(owner.Nonce, sent, g)
			return "", false, nil, nil, b.wrapSent(err, "")
		}
		mine = p[len(dir)+1:]
	}
	var (
		exists bool
		serr   error
		read   = make(chan struct{})
	)
	go func() {
		defer close(read)
		exists, st, serr = b.conn.Exists(dir + "/" + mine)
	}()
	q, err = b.queue(key)
	<-read
	if err == nil {
		err = serr
	}
	if err != nil {
		b.markUnsure(owner.Nonce, sent, g) // our node may stay: the retry finds it
		return "", false, nil, nil, b.wrapSent(err, "")
	}
	if !exists {
		st = nil
	}
	return mine, found, st, q, nil
}

// find returns the path and stat of owner's lock node with token.
func (b *Backend) find(key string, owner backend.Owner, token uint64) (string, *zk.Stat, error) {
	q, err := b.queue(key)
	if err != nil {
		return "", nil, err
	}
	lost := backend.ErrLeaseLost
	if len(q) == 0 || !strings.HasPrefix(q[0], nodeName(owner)) {
		return "", nil, lost
	}
	path := b.lockDir(key) + "/" + q[0]
	data, st, err := b.conn.Get(path)
	if err == zk.ErrNoNode {
		return "", nil, lost
	}
	if err != nil {
		return "", nil, b.wrap(err, "read the lock node")
	}
	if uint64(st.Czxid) != token || !strings.HasPrefix(string(data), owner.Instance+"\n") {
		return "", nil, lost
	}
	return path, st, nil
}

// Renew implements backend.Leases: a version-guarded write of the lock node
// (proving the session alive at send time) restarts its TTL. It returns
// when ctx ends, the outcome unknown (see bounded).
func (b *Backend) Renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	return b.g.Renew(ctx, req, b.renew)
}

func (b *Backend) renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	key, owner, token, ttl := req.Key, req.Owner, req.Token, req.TTL
	if ctx.Err() != nil {
		return backend.Grant{}, backend.NotSent(ctx)
	}
	if err := b.waitAbandoned(ctx, owner.Nonce); err != nil {
		return backend.Grant{}, err
	}
	var (
		grant backend.Grant
		err   error
	)
	if b.bounded(ctx, owner.Nonce, func() { grant, err = b.renewReqs(key, owner, token, ttl) }) {
		return grant, err
	}
	return backend.Grant{}, unknownOutcome(ctx)
}

// renewReqs is Renew's requests.
func (b *Backend) renewReqs(key string, owner backend.Owner, token uint64, ttl time.Duration) (backend.Grant, error) {
	sent := time.Now()
	path, st, err := b.find(key, owner, token)
	if err != nil {
		return backend.Grant{}, err
	}
	g := b.grantTTL(ttl)
	if st.EphemeralOwner != b.conn.SessionID() || !b.extend(path, nil, sent.Add(g)) {
		return backend.Grant{}, fmt.Errorf("%w: key %q, token %d: not kept alive by this session", backend.ErrLeaseLost, key, token)
	}
	err = b.setOwn(path, nodeData(owner, g), nil, st.Version)
	switch {
	case err == zk.ErrNoNode || err == zk.ErrBadVersion:
		// Gone or rewritten: the timer stays, and deletes a node that is
		// still there at the deadline.
		return backend.Grant{}, fmt.Errorf("%w: key %q, token %d: deleted while renewing", backend.ErrLeaseLost, key, token)
	case err != nil:
		return backend.Grant{}, b.wrap(err, "")
	}
	return backend.Grant{Token: token, TTL: g}, nil
}

// Release implements backend.Leases. It returns when ctx ends, the
// outcome unknown (see bounded).
func (b *Backend) Release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	return b.g.Release(ctx, key, owner, token, b.release)
}

func (b *Backend) release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	if ctx.Err() != nil {
		return backend.NotSent(ctx)
	}
	if err := b.waitAbandoned(ctx, owner.Nonce); err != nil {
		return err
	}
	var err error
	if b.bounded(ctx, owner.Nonce, func() { err = b.releaseReqs(key, owner, token) }) {
		return err
	}
	return unknownOutcome(ctx)
}

// releaseReqs is Release's requests.
func (b *Backend) releaseReqs(key string, owner backend.Owner, token uint64) error {
	if path, granted, ok := b.tracked(key, token); ok && b.armed(path, nil) {
		// A grant this backend made and keeps alive: its node's path is
		// unique to the grant (sequence numbers are never reused), so one
		// delete releases it.
		if granted != owner {
			return fmt.Errorf("%w: key %q, token %d: not held by this owner", backend.ErrLeaseLost, key, token)
		}
		err := b.conn.Delete(path, -1)
		switch {
		case err == zk.ErrNoNode:
			b.disarm(path, nil)
			return fmt.Errorf("%w: key %q, token %d: gone while releasing", backend.ErrLeaseLost, key, token)
		case err != nil:
			return b.wrap(err, "")
		}
		b.disarm(path, nil)
		return nil
	}
	path, st, err := b.find(key, owner, token)
	if err != nil {
		return err
	}
	err = b.conn.Delete(path, st.Version)
	if err == zk.ErrBadVersion {
		// A concurrent write of this grant (its renewal, a retry's
		// "yours") came first; the path is the grant's own (see setOwn).
		err = b.conn.Delete(path, -1)
	}
	switch {
	case err == zk.ErrNoNode || err == zk.ErrBadVersion:
		return fmt.Errorf("%w: key %q, token %d: gone while releasing", backend.ErrLeaseLost, key, token)
	case err != nil:
		return b.wrap(err, "")
	}
	b.disarm(path, nil)
	return nil
}

// Get implements backend.Leases.
func (b *Backend) Get(ctx context.Context, key string) (backend.Lease, error) {
	return b.g.Get(ctx, key, b.get)
}

func (b *Backend) get(_ context.Context, key string) (backend.Lease, error) {
	for {
		q, err := b.queue(key)
		if err != nil {
			return backend.Lease{}, err
		}
		if len(q) == 0 {
			return backend.Lease{}, backend.ErrNotFound
		}
		l, _, err := b.lease(key, q[0])
		if err == zk.ErrNoNode {
			continue // released meanwhile; look again
		}
		if err != nil {
			return backend.Lease{}, b.wrap(err, "")
		}
		return l, nil
	}
}

// List implements backend.Leases.
func (b *Backend) List(ctx context.Context, prefix string, limit int) ([]backend.Lease, error) {
	return b.g.List(ctx, prefix, limit, b.list)
}

func (b *Backend) list(ctx context.Context, prefix string, limit int) ([]backend.Lease, error) {
	dirs, _, err := b.conn.Children(b.prefix + "/locks")
	if err != nil {
		return nil, b.wrap(err, "")
	}
	var keys []string
	for _, d := range dirs {
		if k, ok := unescape(d); ok && strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []backend.Lease
	for _, k := range keys {
		if err := b.check(); err != nil { // as each Get did
			return nil, err
		}
		l, err := b.get(ctx, k)
		if err == backend.ErrNotFound {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get key %q: %w", k, err)
		}
		out = append(out, l)
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out, nil
}

// Wait implements backend.Notifier: a watch on the holder's node.
func (b *Backend) Wait(ctx context.Context, key string) (<-chan struct{}, error) {
	return b.g.Wait(ctx, key, b.wait)
}

func (b *Backend) wait(ctx context.Context, key string) (<-chan struct{}, error) {
	ch := make(chan struct{})
	q, err := b.queue(key)
	if err != nil {
		return nil, err
	}
	if len(q) == 0 {
		close(ch)
		return ch, nil
	}
	ok, _, ev, err := b.conn.ExistsW(b.lockDir(key) + "/" + q[0])
	if err != nil {
		return nil, b.wrap(err, "watch the holder's node")
	}
	if !ok {
		close(ch)
		return ch, nil
	}
	go func() {
		defer close(ch)
		select {
		case <-ev:
		case <-ctx.Done():
		case <-b.done:
		}
	}()
	return ch, nil
}

// setOwn writes data to path at version ver. When a concurrent write of
// the same grant changed the version first — another attempt of this
// request answered "yours", or a renewal — it writes again over that one,
// as long as the node still holds want (nil: any data, for a node whose
// path is the grant's own: a lock node, protected and sequential, is never
// made again at the same path). Else the error is the write's: ErrNoNode
// when the node went, ErrBadVersion when it now holds another grant. The
// randomized conformance check caught the plain versioned write telling a
// live grant "lost" when a late first attempt arrived beside its retry.
func (b *Backend) setOwn(path string, data, want []byte, ver int32) error {
	for {
		_, err := b.conn.Set(path, data, ver)
		if err != zk.ErrBadVersion {
			return err
		}
		cur, st, gerr := b.conn.Get(path)
		switch {
		case gerr != nil:
			return gerr
		case want != nil && string(cur) != string(want):
			return zk.ErrBadVersion
		}
		ver = st.Version
	}
}
