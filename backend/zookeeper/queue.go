package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/backend"
)

// AcquireQueued implements backend.Queue: the standard lock recipe with a
// waiter that stays in line. The owner's protected node is created once;
// while a predecessor exists, the call watches only its immediate
// predecessor (no herd effect) and lists the queue again when that node
// goes. When the owner's node is the lowest, the key is granted with no
// further write: the hand-over after a release is the holder's delete, the
// watch event and one getChildren.
//
// The grant's TTL counts from the send time of the listing that found the
// node lowest: the session was alive when the server answered it, so it
// cannot expire before that send time + session timeout ≥ send time + TTL.
// If the session expires while waiting, the server deletes the node; the
// next listing misses it and the call creates a new one (at the back of
// the line). Connection errors are retried until ctx ends.
func (b *Backend) AcquireQueued(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, time.Time, error) {
	return b.g.AcquireQueued(ctx, key, owner, ttl, b.acquireQueued)
}

func (b *Backend) acquireQueued(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return backend.Grant{}, time.Time{}, backend.NotSent(ctx)
	}
	dir := b.lockDir(key)
	g := b.grantTTL(ttl)
	var (
		mine   string    // our node's name; "" until created (or found)
		found  bool      // mine is an earlier attempt's node
		byName uint64    // cleanups by name before mine was created (armGrant)
		token  uint64    // its czxid
		q      []string  // the queue as last listed
		sent   time.Time // send time of the request that listed q
		pause  = 10 * time.Millisecond
	)
	for {
		var err error
		if mine == "" {
			sent = time.Now()
			byName = b.byNameSoFar()
			var st *zk.Stat
			mine, found, st, q, err = b.enter(key, owner, g, sent)
			if err == nil && st == nil {
				mine = "" // deleted at once (the session expired): again
				continue
			}
			if err == nil {
				if st.EphemeralOwner != b.conn.SessionID() {
					// Created by a session that has since been replaced:
					// the server deletes it; wait for that and start over.
					mine, err = "", errors.New("node of an earlier session")
				} else {
					token = uint64(st.Czxid)
				}
			}
		} else {
			sent = time.Now()
			q, err = b.queue(key)
		}
		if err != nil {
			if errors.Is(err, backend.ErrClosed) {
				return backend.Grant{}, time.Time{}, b.closedIn(owner, mine)
			}
			// A lost connection or a create whose reply was lost: enter
			// finds the node by its protected name when it lists again.
			if werr := sleepCtx(ctx, b.done, pause); werr != nil {
				if b.check() != nil {
					return backend.Grant{}, time.Time{}, b.closedIn(owner, mine)
				}
				return b.leave(ctx, key, owner, mine)
			}
			pause = min(pause*2, time.Second)
			continue
		}
		pause = 10 * time.Millisecond
		i := slices.Index(q, mine)
		switch {
		case i < 0:
			mine = "" // our node is gone (session expired): enter again
			continue
		case i == 0:
			path := dir + "/" + mine
			b.hooks.onBeforeGrant(path)
			// As in Acquire: granted only if the node exists once armed,
			// confirmed by a write when something but this call may have
			// been after it (an earlier attempt's node, or a cleanup took
			// on a node by name since the create). Unversioned: the
			// cleanups' deletes are guarded by the version they read
			// before they found the node unarmed, which the write
			// changes; and after a write whose outcome is unknown, the
			// next confirmation still succeeds.
			if b.armGrant(path, sent.Add(g), byName) || found {
				if _, err := b.conn.Set(path, nodeData(owner, g), -1); err == zk.ErrNoNode {
					b.disarm(path, nil)
					mine = "" // deleted before the grant: enter again
					continue
				} else if err != nil {
					if b.check() != nil {
						return backend.Grant{}, time.Time{}, b.closedIn(owner, mine)
					}
					if werr := sleepCtx(ctx, b.done, pause); werr != nil {
						if b.check() != nil {
							return backend.Grant{}, time.Time{}, b.closedIn(owner, mine)
						}
						return b.leave(ctx, key, owner, mine)
					}
					pause = min(pause*2, time.Second)
					continue // still timed from this send time: list again
				}
			}
			b.clearUnsure(owner.Nonce)
			b.track(key, token, path, owner)
			if ctx.Err() != nil {
				// Granted just as the caller gave up: release it unused
				// (no longer kept, so the withdrawal deletes it).
				b.disarm(path, nil)
				return b.leave(ctx, key, owner, mine)
			}
			return backend.Grant{Token: token, TTL: g}, sent, nil
		}
		// Watch only the immediate predecessor.
		ok, _, ev, err := b.conn.ExistsW(dir + "/" + q[i-1])
		if err != nil {
			if b.check() != nil {
				return backend.Grant{}, time.Time{}, b.closedIn(owner, mine)
			}
			if werr := sleepCtx(ctx, b.done, pause); werr != nil {
				if b.check() != nil {
					return backend.Grant{}, time.Time{}, b.closedIn(owner, mine)
				}
				return b.leave(ctx, key, owner, mine)
			}
			continue
		}
		if !ok {
			continue // gone already: list again
		}
		select {
		case <-ev: // deleted, or a session event: list again
		case <-ctx.Done():
			return b.leave(ctx, key, owner, mine)
		case <-b.done:
			return backend.Grant{}, time.Time{}, b.closedIn(owner, mine)
		}
	}
}

// closedIn is the error of an AcquireQueued ended by Close. If no node of
// owner's can exist it is ErrClosed. Otherwise the caller cannot know what
// became of the node (in line, perhaps granted as Close came), so the error
// does not wrap ErrClosed; closing the session has the server delete the
// node — the cleanup, as a closed client can send nothing more.
func (b *Backend) closedIn(owner backend.Owner, mine string) error {
	if mine == "" && !b.unsure(owner.Nonce) {
		return backend.ErrClosed
	}
	return errors.New("the backend was closed while this owner's node was in line; closing the session deletes it")
}

// leave takes owner out of key's line after its caller gave up: it deletes
// mine (or, if mine is not known, any node with owner's protected name).
// If that is confirmed the error wraps backend.ErrNotApplied; otherwise the
// withdrawal goes on in the background until it succeeds, the session ends
// (which deletes the node) or the backend is closed.
func (b *Backend) leave(ctx context.Context, key string, owner backend.Owner, mine string) (backend.Grant, time.Time, error) {
	if b.withdraw(key, owner, mine) {
		return backend.Grant{}, time.Time{}, fmt.Errorf("left the queue: %w", backend.NotSent(ctx))
	}
	go func() {
		pause := 50 * time.Millisecond
		for !b.withdraw(key, owner, mine) {
			if sleepCtx(context.Background(), b.done, pause) != nil {
				return
			}
			pause = min(pause*2, 2*time.Second)
		}
	}()
	return backend.Grant{}, time.Time{}, fmt.Errorf("leaving the queue is not confirmed, it goes on in the background: %w", backend.ContextEnded(ctx))
}

// withdraw deletes owner's node in key's queue and reports whether none is
// left that no timer keeps (one a timer keeps is a grant's, or is deleted
// by its deadline). With mine unknown (a create whose reply was lost), the
// queue is listed first: requests of one session are applied in order, so
// a listing answered after the create was sent shows the node if it was
// created.
func (b *Backend) withdraw(key string, owner backend.Owner, mine string) (left bool) {
	dir := b.lockDir(key)
	names := []string{mine}
	if mine == "" {
		if !b.unsure(owner.Nonce) {
			return true // nothing was sent, or its failure was certain
		}
		defer func(done func(bool)) { done(left) }(b.hooks.onWithdrawList(key, owner))
		q, err := b.syncedQueue(key)
		if err != nil {
			return false
		}
		names = names[:0]
		for _, n := range q {
			if strings.HasPrefix(n, nodeName(owner)) {
				names = append(names, n)
			}
		}
	}
	for _, n := range names {
		// A node a timer keeps is not deleted: a grant's (a retry with
		// this owner was granted it; deleting it would leave a holder
		// without a node, and the next owner granted too) or settle's
		// (deleted by its deadline). The check and the delete are two
		// steps, so the delete is guarded by the version read before the
		// check: a grant that arms the node after the check confirms it
		// with a write (armGrant counts this withdrawal), and only one of
		// the two is applied.
		path := dir + "/" + n
		ok, st, err := b.conn.Exists(path)
		if err != nil {
			return false
		}
		if !ok {
			b.disarm(path, nil)
			continue
		}
		if !b.withdrawable(path) {
			continue
		}
		switch err := b.conn.Delete(path, st.Version); err {
		case nil, zk.ErrNoNode:
			b.disarm(path, nil)
		case zk.ErrBadVersion:
			// Written since the read: a grant confirmed it, and keeps it.
		default:
			return false
		}
	}
	b.clearUnsure(owner.Nonce)
	return true
}

// sleepCtx waits d, or returns an error when ctx ends or done is closed.
func sleepCtx(ctx context.Context, done <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-done:
		return backend.ErrClosed
	}
}
