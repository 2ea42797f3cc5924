package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// TestLateRaiseDoesNotRetagRetry: an Acquire's second round trip — the
// raise of a granting node to the quorum's top token — is part of its
// attempt, and can land late like the attempt itself (held in a
// retransmission, queued behind a connection). The first attempt a1 was
// granted on this node with token t1, while another node of its quorum
// answered a greater top1; the raise to top1 did not come back in time,
// so a1 was undone (u1) and the Locker retried under the same nonce: a2
// was granted here with t2 and returned with it. Then a1's raise arrives.
// It must change nothing of a2's grant: rewriting the owner's lease to
// top1 makes every renewal of t2 fail on this node (on a quorum of such
// nodes the holder is told its lease is lost while it is on the nodes,
// keeping the key from everyone until it expires), and Get name a token
// the holder was never given.
func TestLateRaiseDoesNotRetagRetry(t *testing.T) {
	b := scriptBackend(t)
	ctx := context.Background()
	s := newScriptNode(b, "late-raise")

	if !s.play(t, a1) {
		t.Fatal("a1 was not granted on an empty node")
	}
	v, err := s.n.c.Get(ctx, b.leaseKey(s.key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	l1, err := parseValue(s.key, v)
	if err != nil {
		t.Fatal(err)
	}
	// a1's quorum answered a greater token elsewhere: its raise to top1
	// is sent here, and is held.
	top1 := l1.Token + 5
	s.play(t, u1)
	if !s.play(t, a2) {
		t.Fatal("the retry a2 was not granted")
	}
	if s.token == l1.Token || s.token >= top1 {
		t.Fatalf("setup: a2's token %d, a1's %d, top1 %d", s.token, l1.Token, top1)
	}
	// a2's quorum agreed on t2 (no raise): the holder has t2. Now a1's
	// held raise lands.
	keys, args := b.raiseCall(s.key, s.owner, top1, s.pxOf(a1), s.at[a1])
	late, err := s.n.p.Do(ctx, raiseLua, keys, args...).Int()
	if err != nil {
		t.Fatal(err)
	}
	v, err = s.n.c.Get(ctx, b.leaseKey(s.key)).Result()
	if err != nil {
		t.Fatalf("the holder's lease is gone after a1's late raise: %v", err)
	}
	l, err := parseValue(s.key, v)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token != s.token {
		t.Errorf("a1's late raise (reply %d) re-tagged the retry's grant: the node's lease carries token %d, the holder was given %d", late, l.Token, s.token)
	}
	if !s.play(t, renew) {
		t.Errorf("the holder's renewal of token %d failed on the node after a1's late raise: its lease is answered lost while it is held", s.token)
	}
}

// TestRaiseAgreesOnTheQuorumsTop: on three real nodes whose counters
// differ, a grant's raise (made in time, under the attempt it belongs to)
// rewrites every granting node's lease to the quorum's top token, so Get
// names the token the holder was given and renewals succeed on every node.
func TestRaiseAgreesOnTheQuorumsTop(t *testing.T) {
	// A node timeout for a loaded machine: the first calls dial.
	b, _, cs := proxiedBackend(t, 3, WithNodeTimeout(5*time.Second))
	ctx := context.Background()
	const key = "raise/k"
	if err := cs[0].Set(ctx, b.tokenKey(key), 10, 0).Err(); err != nil {
		t.Fatal(err)
	}
	owner := backend.Owner{Instance: "w", Nonce: backend.NewNonce()}
	g, err := b.Acquire(ctx, key, owner, 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if g.Token != 11 {
		t.Fatalf("granted token %d, want the quorum's top 11", g.Token)
	}
	for i, c := range cs {
		v, err := c.Get(ctx, b.leaseKey(key)).Result()
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		if l, err := parseValue(key, v); err != nil || l.Token != g.Token {
			t.Errorf("node %d holds %q, want token %d (err %v)", i, v, g.Token, err)
		}
	}
	if l, err := b.Get(ctx, key); err != nil || l.Token != g.Token {
		t.Errorf("Get: %+v, %v; want token %d", l, err, g.Token)
	}
	if _, err := b.Renew(ctx, backend.RenewRequest{Key: key, Owner: owner, Token: g.Token, TTL: 10 * time.Second}); err != nil {
		t.Errorf("Renew: %v", err)
	}
}
