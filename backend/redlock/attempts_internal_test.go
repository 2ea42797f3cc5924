package redlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// An event is one request of one owner that reaches one node: the two
// attempts of an Acquire the Locker retried under the same owner nonce
// (a2 is the retry), their undos, and the holder's renewal and release.
type event string

const (
	a1      event = "a1"
	a2      event = "a2"
	u1      event = "u1"
	u2      event = "u2"
	r1      event = "r1" // a1's raise to its quorum's top token (lateRaiseTop)
	renew   event = "renew"
	release event = "release"
)

// history is what the owner did, which decides what a node must hold
// after the events arrive in any order.
type history int

const (
	// heldHistory: a1 failed (u1 sent), the retry a2 was granted with
	// this node in its quorum, the holder renewed and released. renew and
	// release are sent after a2's reply, so they arrive after a2.
	heldHistory history = iota
	// failedHistory: a1 failed, a2 failed too: both undone.
	failedHistory
)

// scriptNode plays events on one real redis-server through the
// backend's scripts, for one key and owner.
type scriptNode struct {
	b     *Backend
	n     *node
	key   string
	owner backend.Owner
	at    map[event]attempt // a1 and a2's attempts, a1's made first
	px    map[event]int64   // px of an event, default 10 s
	token uint64            // the token a2 was answered (renew, release)
}

// scriptBackend is a Backend whose three nodes are one redis-server (a
// scriptNode plays on node 0 alone; New wants three).
func scriptBackend(t *testing.T) *Backend {
	t.Helper()
	srv := testserver.Redis(t)
	var cs []goredis.UniversalClient
	for range 3 {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	b, err := New(cs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func newScriptNode(b *Backend, key string) *scriptNode {
	s := &scriptNode{b: b, n: b.nodes[0], key: key, owner: backend.Owner{Instance: "w", Nonce: backend.NewNonce()},
		at: map[event]attempt{}, px: map[event]int64{}}
	s.at[a1] = b.nextAttempt()
	s.at[a2] = b.nextAttempt()
	return s
}

func (s *scriptNode) pxOf(e event) int64 {
	if px, ok := s.px[e]; ok {
		return px
	}
	return ceilMS(10 * time.Second)
}

// play sends e to the node and returns its reply: for an attempt,
// whether it was granted; for the others, whether the script reported
// it did something (1 or 2).
func (s *scriptNode) play(t *testing.T, e event) bool {
	t.Helper()
	ctx := context.Background()
	var c *goredis.Cmd
	switch e {
	case a1, a2:
		keys, args := s.b.acquireCall(s.key, s.owner, s.pxOf(e), s.at[e])
		r := acquireReply(s.n.p.Do(ctx, acquireLua, keys, args...))
		if r.err != nil && !r.superseded() {
			t.Fatalf("%s: %v", e, r.err)
		}
		if r.ok && e == a2 {
			s.token = r.token
		}
		return r.ok && r.err == nil
	case u1, u2:
		a := map[event]event{u1: a1, u2: a2}[e]
		keys, args := s.b.undoCall(s.key, s.owner, s.pxOf(a), s.at[a])
		c = s.n.p.Do(ctx, undoLua, keys, args...)
	case r1:
		keys, args := s.b.raiseCall(s.key, s.owner, lateRaiseTop, s.pxOf(a1), s.at[a1])
		c = s.n.p.Do(ctx, raiseLua, keys, args...)
	case renew:
		keys, args := s.b.renewCall(s.key, s.owner, s.token, s.pxOf(e))
		c = s.n.p.Do(ctx, renewLua, keys, args...)
	case release:
		keys, args := s.b.releaseCall(s.key, s.owner, s.token)
		c = s.n.p.Do(ctx, releaseLua, keys, args...)
	}
	v, err := c.Int()
	if err != nil {
		t.Fatalf("%s: %v", e, err)
	}
	return v != 0
}

// leaseToken reads the token of the lease on the node (0 if none).
func (s *scriptNode) leaseToken(t *testing.T) uint64 {
	t.Helper()
	v, err := s.n.c.Get(context.Background(), s.b.leaseKey(s.key)).Result()
	if err == goredis.Nil {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	l, err := parseValue(s.key, v)
	if err != nil {
		t.Fatal(err)
	}
	return l.Token
}

// state reads whether the node holds the owner's lease, and checks the
// record an undo is judged by: while the lease is there, its attempt
// record is there too and lives at least as long (else a late attempt
// would find no record to be older than).
func (s *scriptNode) state(t *testing.T) bool {
	t.Helper()
	ctx := context.Background()
	c := s.n.c
	v, err := c.Get(ctx, s.b.leaseKey(s.key)).Result()
	if err == goredis.Nil {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	l, err := parseValue(s.key, v)
	if err != nil {
		t.Fatal(err)
	}
	if l.Owner != s.owner {
		return false
	}
	// Read in one script, the record first: the node's clock may move a
	// millisecond between the two reads (as between the two expiries a
	// script sets, the record's last), never back.
	ps, err := pttlsLua.Run(ctx, c, []string{s.b.attemptKey(s.key), s.b.leaseKey(s.key)}).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	ap, lp := time.Duration(ps[0])*time.Millisecond, time.Duration(ps[1])*time.Millisecond
	if ap < 0 || ap < lp {
		t.Fatalf("the owner's lease lives %v more, its attempt record %v (-2: gone): a late attempt would find no record to be older than", lp, ap)
	}
	return true
}

// lateRaiseTop is the top token a1's raise carries: another node of a1's
// quorum answered it.
const lateRaiseTop = 1_000_000

var pttlsLua = goredis.NewScript(`return {redis.call('PTTL', KEYS[1]), redis.call('PTTL', KEYS[2])}`)

// permutations returns every order of es.
func permutations(es []event) [][]event {
	if len(es) <= 1 {
		return [][]event{slices.Clone(es)}
	}
	var out [][]event
	for i := range es {
		rest := append(slices.Clone(es[:i]), es[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]event{es[i]}, p...))
		}
	}
	return out
}

// attemptCase is one order of arrival at one node.
type attemptCase struct {
	name  string
	h     history
	order []event
	// px overrides an event's px (the hostile case's short first grant).
	px map[event]time.Duration
	// before, if set, runs before the event of that index (the hostile
	// case waits for the node's clock there).
	before map[int]func(t *testing.T, s *scriptNode)
}

// TestAttemptInterleavings plays, on a real redis-server through the
// backend's scripts, every order in which {a1, u1, a2, u2, renew,
// release} can reach one node for both histories, plus the named cases:
//
//   - heldHistory: a2 is granted whatever arrived before it; from a2 on,
//     until the release, the owner's lease stays on the node (neither
//     the late a1 nor the late u1 removes it or re-tags it), a renewal
//     before the release succeeds, and after everything nothing of the
//     owner is left (a1 arriving after the release grants nothing);
//   - failedHistory: after everything, nothing of the owner is left on
//     the node (an undo that overtook its attempt refuses it when it
//     arrives).
//
// Before the fix the reported break is the case "a2 a1 u1": the late a1
// re-tags the node with its older attempt id and u1 deletes a2's lease.
func TestAttemptInterleavings(t *testing.T) {
	b := scriptBackend(t)

	cases := []attemptCase{
		{name: "the reported break: the retry first, then the late attempt and its undo", h: heldHistory,
			order: []event{a2, a1, u1, renew, release}},
		{name: "the undo overtakes its attempt, the retry comes between", h: heldHistory,
			order: []event{u1, a2, a1, renew, release}},
		{name: "hostile: the renewal outlives the retry's own expiry, then the late attempt and undo", h: heldHistory,
			order: []event{a2, renew, a1, u1, release},
			px:    map[event]time.Duration{a2: 300 * time.Millisecond, renew: 10 * time.Second},
			before: map[int]func(*testing.T, *scriptNode){2: func(t *testing.T, s *scriptNode) {
				// Wait, by the node's clock, until a2's own expiry
				// has passed: the lease now lives on the renewal alone.
				eventually.True(t, 10*time.Second, "a2's 300 ms expiry passing on the node", func() bool {
					p, err := s.n.c.PTTL(context.Background(), s.b.leaseKey(s.key)).Result()
					return err == nil && p > 0 && p < 10*time.Second-400*time.Millisecond
				})
			}}},
		{name: "hostile: the retry's undo overtakes the retry on a node that holds only the first attempt", h: failedHistory,
			order: []event{a1, u2, a2, u1}},
	}
	for _, o := range permutations([]event{a1, u1, a2, renew, release}) {
		if i := slices.Index(o, a2); i < slices.Index(o, renew) && i < slices.Index(o, release) {
			cases = append(cases, attemptCase{h: heldHistory, order: o})
		}
	}
	// a1's raise, sent after a1's reply, lands anywhere after a1: it must
	// not re-tag a2's grant (TestLateRaiseDoesNotRetagRetry).
	for _, o := range permutations([]event{a1, u1, a2, r1, renew, release}) {
		i := slices.Index(o, a2)
		if i < slices.Index(o, renew) && i < slices.Index(o, release) && slices.Index(o, a1) < slices.Index(o, r1) {
			cases = append(cases, attemptCase{h: heldHistory, order: o})
		}
	}
	for _, o := range permutations([]event{a1, u1, a2, u2}) {
		cases = append(cases, attemptCase{h: failedHistory, order: o})
	}
	for i, c := range cases {
		name := c.name
		if name == "" {
			name = fmt.Sprintf("%v", c.order)
		}
		t.Run(name, func(t *testing.T) {
			s := newScriptNode(b, fmt.Sprintf("interleave/%d", i))
			for e, d := range c.px {
				s.px[e] = ceilMS(d)
			}
			var trace []string
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("arrival order %v (history %d), after %s: %s", c.order, c.h, strings.Join(trace, " "), fmt.Sprintf(format, args...))
			}
			a2in, released := false, false
			for k, e := range c.order {
				if f := c.before[k]; f != nil {
					f(t, s)
				}
				did := s.play(t, e)
				trace = append(trace, fmt.Sprintf("%s=%v", e, did))
				held := s.state(t)
				switch e {
				case a2:
					a2in = true
					if c.h == heldHistory && !did {
						fail("the retry was not granted")
					}
				case release:
					released = true
				case renew:
					if !released && !did {
						fail("the holder's renewal failed before its release")
					}
				}
				if c.h == heldHistory && a2in && !released && !held {
					fail("the holder's lease is gone from the node (another owner can now win a quorum)")
				}
				if c.h == heldHistory && a2in && !released {
					if tok := s.leaseToken(t); tok != s.token {
						fail("the holder's lease carries token %d, the holder was given %d (its renewals fail here)", tok, s.token)
					}
				}
			}
			if s.state(t) {
				fail("the owner's lease is left on the node after everything was undone or released")
			}
		})
	}
}
