package redlock

import (
	"context"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
)

// TestRetryOfTheHolderKeepsItsToken is the randomized check's seed
// 9293713984603173496 made deterministic: the holder was granted token 1
// on nodes 0 and 1, and node 2 holds the same owner's lease under its own
// token 5 (its reply to the grant was lost, so the grant never raised it).
// An Acquire with the holder's own nonce (a late copy of a call, made as
// a new call) must answer the holder's token and keep it: before, it took
// the largest token it saw (5), re-tagged the quorum with it, and the
// holder's Renew and Release with token 1 then failed while its lease
// was live. The same with node 2 free and its counter ahead (a fresh
// grant there), and with one node unreachable.
func TestRetryOfTheHolderKeepsItsToken(t *testing.T) {
	const ttl = 10 * time.Second
	for _, tc := range []struct {
		name string
		// node 2's state: "lease" holds the owner's lease under token 5,
		// "free" holds nothing (its counter is 5).
		node2 string
		// down: node 1 unreachable for the retry (its lease with token 1
		// stays).
		down bool
		// want is the token the retry must answer (0: the retry cannot
		// tell which token the quorum carries and must answer an unknown
		// outcome, changing no node's token).
		want uint64
	}{
		{name: "minority holds another token", node2: "lease", want: 1},
		{name: "minority free, counter ahead", node2: "free", want: 1},
		{name: "minority free, counter ahead, one node down", node2: "free", down: true, want: 1},
		{name: "one token each on the two reachable nodes", node2: "lease", down: true, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ps, ds := proxied(t, 3)
			var cs []goredis.UniversalClient
			for _, p := range ps {
				c := goredis.NewClient(&goredis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
				t.Cleanup(func() { c.Close() })
				cs = append(cs, c)
			}
			b, err := New(cs, WithNodeTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			if tc.down {
				ps[1].SetRefuse(true)
				ps[1].CloseConns()
			}
			ctx := context.Background()
			const key = "yours/k"
			owner := backend.Owner{Instance: "w", Nonce: backend.NewNonce()}
			value := func(tok uint64) string { return strconv.FormatUint(tok, 10) + ":" + ownerArg(owner) }
			for i, d := range ds {
				tok := uint64(1)
				if i == 2 {
					tok = 5
				}
				if err := d.Set(ctx, b.tokenKey(key), tok, 0).Err(); err != nil {
					t.Fatal(err)
				}
				if i == 2 && tc.node2 == "free" {
					continue
				}
				if err := d.Set(ctx, b.leaseKey(key), value(tok), ttl).Err(); err != nil {
					t.Fatal(err)
				}
			}
			g, err := b.Acquire(ctx, key, owner, ttl)
			switch {
			case tc.want == 0 && err == nil:
				t.Fatalf("Acquire answered token %d; want an unknown outcome (nodes 0 and 2 name tokens 1 and 5)", g.Token)
			case tc.want == 0:
				t.Logf("Acquire: %v", err)
			case err != nil:
				t.Fatalf("Acquire by the holder's nonce: %v", err)
			case g.Token != tc.want:
				t.Fatalf("Acquire by the holder's nonce answered token %d, want the holder's %d", g.Token, tc.want)
			}
			// The holder's grant (token 1 on nodes 0 and 1) is intact:
			// node 0 and node 1 still carry token 1.
			for _, i := range []int{0, 1} {
				v, err := ds[i].Get(ctx, b.leaseKey(key)).Result()
				if err != nil || v != value(1) {
					t.Errorf("node %d holds %q (%v), want %q", i, v, err, value(1))
				}
			}
			if tc.want == 0 {
				// Node 2 keeps its own token: nothing was re-tagged.
				if v, err := ds[2].Get(ctx, b.leaseKey(key)).Result(); err != nil || v != value(5) {
					t.Errorf("node 2 holds %q (%v), want %q", v, err, value(5))
				}
				return // with node 1 down, the holder's quorum is out of reach
			}
			if _, err := b.Renew(ctx, backend.RenewRequest{Key: key, Owner: owner, Token: 1, TTL: ttl}); err != nil {
				t.Errorf("the holder's Renew with token 1: %v", err)
			}
			if err := b.Release(ctx, key, owner, 1); err != nil {
				t.Errorf("the holder's Release with token 1: %v", err)
			}
		})
	}
}
