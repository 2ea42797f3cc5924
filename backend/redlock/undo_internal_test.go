package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// TestLateUndoLeavesTheRetrysGrant: an Acquire whose quorum failed undoes
// what it may have been granted; if that undo's reply is lost, the Locker
// retries with the same owner nonce. An undo still in flight (held in a
// TCP retransmission, or queued behind a connection) that lands after the
// retry must not delete the retry's grant on that node: the holder would
// then hold less than a quorum, and another owner could win one. Each
// undo is played here as it would arrive late: after the retry's grant.
// (With undo by owner alone, the old releaseScript with token "0", node 0
// loses the retry's lease.) TestAttemptInterleavings plays every order.
func TestLateUndoLeavesTheRetrysGrant(t *testing.T) {
	b, _, _ := proxiedBackend(t, 3)
	ctx := context.Background()
	const key = "svc/late-undo"
	o := backend.Owner{Instance: "w", Nonce: backend.NewNonce()}
	px := ceilMS(10 * time.Second)
	// Attempt 1 was applied on node 0 only (the other replies lost); its
	// undo is sent, and delayed.
	first := b.nextAttempt()
	n0 := b.nodes[0]
	keys, args := b.acquireCall(key, o, px, first)
	if err := n0.p.Do(ctx, acquireLua, keys, args...).Err(); err != nil {
		t.Fatal(err)
	}
	// The retry, same nonce: "yours" on node 0, granted on the others.
	g, err := b.Acquire(ctx, key, o, 10*time.Second)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	// Attempt 1's undo lands now.
	keys, args = b.undoCall(key, o, px, first)
	n, err := n0.p.Do(ctx, undoLua, keys, args...).Int()
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the late undo of attempt 1 deleted %d lease(s) on node 0, the retry's grant (token %d)", n, g.Token)
	}
	for i, nd := range b.nodes {
		v, err := nd.p.Do(ctx, getLua, []string{b.leaseKey(key)}).Slice()
		if err != nil {
			t.Fatalf("node %d: the retry's lease is gone after a late undo: %v", i, err)
		}
		if l, err := parseValue(key, v[0].(string)); err != nil || l.Owner != o {
			t.Fatalf("node %d holds %v (%v), want the retry's owner", i, v, err)
		}
	}
	// An undo of the attempt that did grant (the retry's own, were its
	// quorum to fail) still deletes.
	if err := b.Release(ctx, key, o, g.Token); err != nil {
		t.Fatal(err)
	}
	own := b.nextAttempt()
	keys, args = b.acquireCall(key, o, px, own)
	if err := n0.p.Do(ctx, acquireLua, keys, args...).Err(); err != nil {
		t.Fatal(err)
	}
	keys, args = b.undoCall(key, o, px, own)
	if n, err := n0.p.Do(ctx, undoLua, keys, args...).Int(); err != nil || n != 1 {
		t.Fatalf("the undo of the attempt that granted deleted %d, %v; want 1", n, err)
	}
}
