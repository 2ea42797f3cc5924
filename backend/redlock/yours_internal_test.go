package redlock

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
)

// TestRetryOfTheHolderKeepsItsToken is the randomized check's seed
// 9293713984603173496 made deterministic, with its neighbours: the owner's
// lease is on some nodes (each entry of lease: the token a node's copy
// carries, 0 for none; the node's counter is at least it), and a call with
// the owner's nonce comes (a retry, or a copy of a call made late as a
// call of its own).
//
//   - When a quorum carries one token (the holder's grant), the call must
//     answer it and keep it: before, it took the largest token it saw,
//     re-tagged the quorum with it, and the holder's Renew and Release
//     with its token then failed while its lease was live.
//   - When no quorum can carry a token (strays of attempts whose outcome
//     was unknown), it is a new grant: the largest token, every node
//     re-tagged — not a stray's token, which may be older than another
//     owner's grant since (a token going back), nor "unknown" for ever.
//   - When a live holder may carry a token no quorum here names (a node
//     down), the outcome is unknown and no node's lease changes.
func TestRetryOfTheHolderKeepsItsToken(t *testing.T) {
	// The copies there before the call expire sooner than the call's TTL:
	// a grant extends them, a call that fails must not (a stray kept
	// alive by every retry would block the key for as long as they go on).
	const ttl, copyTTL = 10 * time.Second, 3 * time.Second
	for _, tc := range []struct {
		name    string
		lease   [3]uint64 // each node's copy of the owner's lease (0: none)
		counter [3]uint64
		down    bool   // node 1 unreachable for the call
		holder  uint64 // the token of the holder's quorum (0: no holder)
		want    uint64 // the answer (0: outcome unknown)
	}{
		{name: "minority holds another token", lease: [3]uint64{1, 1, 5}, counter: [3]uint64{1, 1, 5}, holder: 1, want: 1},
		{name: "minority free, counter ahead", lease: [3]uint64{1, 1, 0}, counter: [3]uint64{1, 1, 5}, holder: 1, want: 1},
		{name: "minority free, counter ahead, one node down", lease: [3]uint64{1, 1, 0}, counter: [3]uint64{1, 1, 5}, down: true, holder: 1, want: 0},
		{name: "one token each on the two reachable nodes", lease: [3]uint64{1, 1, 5}, counter: [3]uint64{1, 1, 5}, down: true, holder: 1, want: 0},
		{name: "a stray on one node, another owner granted since", lease: [3]uint64{1, 0, 0}, counter: [3]uint64{1, 5, 5}, want: 6},
		{name: "strays under two tokens", lease: [3]uint64{1, 3, 0}, counter: [3]uint64{1, 3, 6}, want: 7},
		{name: "a stray on one node, a node down", lease: [3]uint64{1, 0, 0}, counter: [3]uint64{1, 5, 5}, down: true, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, ps, ds := proxiedBackend(t, 3, WithNodeTimeout(5*time.Second))
			if tc.down {
				ps[1].SetRefuse(true)
				ps[1].CloseConns()
			}
			ctx := context.Background()
			const key = "yours/k"
			owner := backend.Owner{Instance: "w", Nonce: backend.NewNonce()}
			value := func(tok uint64) string { return strconv.FormatUint(tok, 10) + ":" + ownerArg(owner) }
			read := func(i int) uint64 {
				v, err := ds[i].Get(ctx, b.leaseKey(key)).Result()
				if errors.Is(err, goredis.Nil) {
					return 0
				}
				if err != nil || v != value(mustToken(t, key, v)) {
					t.Fatalf("node %d: %q, %v", i, v, err)
				}
				return mustToken(t, key, v)
			}
			pttl := func(i int) time.Duration {
				p, err := ds[i].PTTL(ctx, b.leaseKey(key)).Result()
				if err != nil {
					t.Fatalf("node %d: PTTL: %v", i, err)
				}
				return p
			}
			for i, d := range ds {
				if err := d.Set(ctx, b.tokenKey(key), tc.counter[i], 0).Err(); err != nil {
					t.Fatal(err)
				}
				if tc.lease[i] != 0 {
					if err := d.Set(ctx, b.leaseKey(key), value(tc.lease[i]), copyTTL).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			g, err := b.Acquire(ctx, key, owner, ttl)
			switch {
			case tc.want == 0 && err == nil:
				t.Fatalf("Acquire answered token %d; want an unknown outcome", g.Token)
			case tc.want == 0:
				t.Logf("Acquire: %v", err)
				for i := range ds {
					if got := read(i); got != tc.lease[i] {
						t.Errorf("node %d carries token %d after an unknown outcome, want %d as before", i, got, tc.lease[i])
					}
					if p := pttl(i); p > copyTTL {
						t.Errorf("node %d: the copy's expiry was extended (%v left) by a call that failed", i, p)
					}
				}
				return
			case err != nil:
				t.Fatalf("Acquire with the owner's nonce: %v", err)
			case g.Token != tc.want:
				t.Fatalf("Acquire with the owner's nonce answered token %d, want %d", g.Token, tc.want)
			}
			for i := range ds {
				if got := read(i); got != tc.want {
					t.Errorf("node %d carries token %d, want %d", i, got, tc.want)
				}
				if p := pttl(i); p <= copyTTL {
					t.Errorf("node %d: %v left, want the grant's TTL %v", i, p, ttl)
				}
			}
			if _, err := b.Renew(ctx, backend.RenewRequest{Key: key, Owner: owner, Token: g.Token, TTL: ttl}); err != nil {
				t.Errorf("Renew with token %d: %v", g.Token, err)
			}
			if err := b.Release(ctx, key, owner, g.Token); err != nil {
				t.Errorf("Release with token %d: %v", g.Token, err)
			}
		})
	}
}

func mustToken(t *testing.T, key, v string) uint64 {
	t.Helper()
	l, err := parseValue(key, v)
	if err != nil {
		t.Fatal(err)
	}
	return l.Token
}

// TestFailedRetryOfTheHolderKeepsItsLease: the holder was granted token 1
// on nodes 0 and 1; a call with its nonce then reaches node 0 only ("yours")
// while nodes 1 and 2 swallow their requests (sent, no reply). The call
// fails short of a quorum, and its undo must not delete the lease node 0
// had before the call — the holder's — or the holder, whose lease is live,
// loses its quorum when node 1 answers again.
func TestFailedRetryOfTheHolderKeepsItsLease(t *testing.T) {
	const ttl = 10 * time.Second
	b, ps, ds := proxiedBackend(t, 3, WithNodeTimeout(500*time.Millisecond))
	ctx := context.Background()
	const key = "yours/undo"
	owner := backend.Owner{Instance: "w", Nonce: backend.NewNonce()}
	value := "1:" + ownerArg(owner)
	for _, i := range []int{0, 1} {
		if err := ds[i].Set(ctx, b.tokenKey(key), 1, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := ds[i].Set(ctx, b.leaseKey(key), value, ttl).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ps[1].SetDrop(true)
	ps[2].SetDrop(true)
	if g, err := b.Acquire(ctx, key, owner, ttl); err == nil {
		t.Fatalf("Acquire with two nodes silent answered %+v", g)
	} else {
		t.Logf("Acquire: %v", err)
	}
	ps[1].SetDrop(false)
	ps[2].SetDrop(false)
	ps[1].CloseConns()
	ps[2].CloseConns()
	if v, err := ds[0].Get(ctx, b.leaseKey(key)).Result(); err != nil || v != value {
		t.Errorf("node 0 holds %q (%v), want the holder's %q", v, err, value)
	}
	if _, err := b.Renew(ctx, backend.RenewRequest{Key: key, Owner: owner, Token: 1, TTL: ttl}); err != nil {
		t.Errorf("the holder's Renew with token 1: %v", err)
	}
}

// TestRetryOfTheHolderIsNotAnsweredHeld: the holder's lease (token 1) is on
// nodes 0 and 1, another owner's stray (its release there was lost) on
// node 2, and node 1 cannot be sent the call (its pipe is closed). A call
// with the holder's nonce must not answer that the other owner holds the
// key: node 1 may hold the holder's copy, so the outcome is unknown (the
// third hostile review found it answered Held).
func TestRetryOfTheHolderIsNotAnsweredHeld(t *testing.T) {
	b, _, ds := proxiedBackend(t, 3, WithNodeTimeout(5*time.Second))
	ctx := context.Background()
	const key = "yours/held"
	h := backend.Owner{Instance: "h", Nonce: backend.NewNonce()}
	y := backend.Owner{Instance: "y", Nonce: backend.NewNonce()}
	for i, d := range ds {
		if err := d.Set(ctx, b.tokenKey(key), 7, 0).Err(); err != nil {
			t.Fatal(err)
		}
		v := "1:" + ownerArg(h)
		if i == 2 {
			v = "7:" + ownerArg(y)
		}
		if err := d.Set(ctx, b.leaseKey(key), v, 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	b.nodes[1].p.Close()
	_, err := b.Acquire(ctx, key, h, 10*time.Second)
	var he *backend.HeldError
	if errors.As(err, &he) || errors.Is(err, backend.ErrNotApplied) || err == nil {
		t.Fatalf("Acquire with the holder's nonce: %v; want an unknown outcome (node 1 may hold the holder's copy)", err)
	}
	t.Logf("Acquire: %v", err)
}
