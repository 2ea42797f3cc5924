//go:build linux

package sqlite

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

func TestAcquireRenewRelease(t *testing.T) {
	b, ctx := open(t, dbPath(t)), context.Background()
	a, c := own("alpha"), own("beta")
	g, err := b.Acquire(ctx, "k", a, time.Minute)
	must(t, err, "Acquire")
	if g.Token != 1 || g.TTL != time.Minute {
		t.Fatalf("grant %+v, want token 1 TTL 1m", g)
	}
	g2, err := b.Acquire(ctx, "k", a, time.Minute)
	must(t, err, "retried Acquire")
	if g2.Token != g.Token {
		t.Fatalf("retried Acquire answered token %d, want %d", g2.Token, g.Token)
	}
	_, err = b.Acquire(ctx, "k", c, time.Minute)
	var held *backend.HeldError
	if !errors.As(err, &held) || !errors.Is(err, backend.ErrLeaseHeld) {
		t.Fatalf("Acquire by another owner: %v", err)
	}
	if held.Holder.Owner != a || held.Holder.Token != 1 || held.Holder.Key != "k" || held.Holder.Remaining <= 0 || held.Holder.Remaining > time.Minute {
		t.Fatalf("holder %+v", held.Holder)
	}
	twin := backend.Owner{Instance: "alpha", Nonce: backend.NewNonce()}
	_, err = b.Acquire(ctx, "k", twin, time.Minute)
	mustIs(t, err, backend.ErrLeaseHeld, "Acquire by the same name with another nonce")

	r, err := b.Renew(ctx, backend.RenewRequest{Key: "k", Owner: a, Token: g.Token, TTL: 2 * time.Minute})
	must(t, err, "Renew")
	if r.Token != g.Token || r.TTL != 2*time.Minute {
		t.Fatalf("Renew = %+v", r)
	}
	l, err := b.Get(ctx, "k")
	must(t, err, "Get")
	if l.Remaining <= time.Minute || l.Owner != a || l.Token != 1 {
		t.Fatalf("Get after Renew = %+v", l)
	}
	_, err = b.Renew(ctx, backend.RenewRequest{Key: "k", Owner: a, Token: g.Token + 1, TTL: time.Minute})
	mustIs(t, err, backend.ErrLeaseLost, "Renew with a wrong token")
	_, err = b.Renew(ctx, backend.RenewRequest{Key: "k", Owner: twin, Token: g.Token, TTL: time.Minute})
	mustIs(t, err, backend.ErrLeaseLost, "Renew by a twin")
	mustIs(t, b.Release(ctx, "k", twin, g.Token), backend.ErrLeaseLost, "Release by a twin")
	if err := b.Release(ctx, "k", c, g.Token); !errors.Is(err, backend.ErrLeaseLost) || !strings.Contains(err.Error(), `"k"`) {
		t.Fatalf("Release by another owner: %v (must wrap ErrLeaseLost and name the key)", err)
	}
	must(t, b.Release(ctx, "k", a, g.Token), "Release")
	_, err = b.Get(ctx, "k")
	mustIs(t, err, backend.ErrNotFound, "Get after Release")
	mustIs(t, b.Release(ctx, "k", a, g.Token), backend.ErrLeaseLost, "second Release")
	_, err = b.Renew(ctx, backend.RenewRequest{Key: "k", Owner: a, Token: g.Token, TTL: time.Minute})
	mustIs(t, err, backend.ErrLeaseLost, "Renew after Release")
	g3, err := b.Acquire(ctx, "k", c, time.Minute)
	must(t, err, "Acquire after Release")
	if g3.Token != 2 {
		t.Fatalf("token after release %d, want 2 (counter kept)", g3.Token)
	}
	g4, err := b.Acquire(ctx, "other", c, time.Minute)
	must(t, err, "Acquire another key")
	if g4.Token != 1 {
		t.Fatalf("token of a fresh key %d, want 1 (counters are per key)", g4.Token)
	}
}

func TestExpiryOnFakeClock(t *testing.T) {
	clk := newFakeClock()
	b, ctx := open(t, dbPath(t), clk.option()), context.Background()
	a, c := own("a"), own("c")
	g, err := b.Acquire(ctx, "k", a, time.Second)
	must(t, err, "Acquire")
	clk.advance(time.Second - time.Nanosecond)
	_, err = b.Acquire(ctx, "k", c, time.Second)
	mustIs(t, err, backend.ErrLeaseHeld, "Acquire 1ns before expiry")
	l, err := b.Get(ctx, "k")
	must(t, err, "Get")
	if l.Remaining != time.Nanosecond {
		t.Fatalf("Remaining %v, want 1ns", l.Remaining)
	}
	clk.advance(time.Nanosecond)
	_, err = b.Get(ctx, "k")
	mustIs(t, err, backend.ErrNotFound, "Get at expiry")
	_, err = b.Renew(ctx, backend.RenewRequest{Key: "k", Owner: a, Token: g.Token, TTL: time.Second})
	mustIs(t, err, backend.ErrLeaseLost, "Renew at expiry")
	mustIs(t, b.Release(ctx, "k", a, g.Token), backend.ErrLeaseLost, "Release at expiry")
	ls, err := b.List(ctx, "", 0)
	must(t, err, "List")
	if len(ls) != 0 {
		t.Fatalf("List shows expired leases: %+v", ls)
	}
	gc, err := b.Acquire(ctx, "k", c, time.Second)
	must(t, err, "Acquire after expiry")
	if gc.Token != g.Token+1 {
		t.Fatalf("token after expiry %d, want %d", gc.Token, g.Token+1)
	}
	// The expired owner's retry is not "yours" any more.
	_, err = b.Acquire(ctx, "k", a, time.Second)
	mustIs(t, err, backend.ErrLeaseHeld, "Acquire by the expired owner")
}

func TestExpiryOnRealClock(t *testing.T) {
	b, ctx := open(t, dbPath(t)), context.Background()
	g, err := b.Acquire(ctx, "k", own("a"), 20*time.Millisecond)
	must(t, err, "Acquire")
	deadline := time.Now().Add(10 * time.Second)
	c := own("c")
	for {
		gc, err := b.Acquire(ctx, "k", c, time.Minute)
		if err == nil {
			if gc.Token <= g.Token {
				t.Fatalf("token %d after expiry not greater than %d", gc.Token, g.Token)
			}
			break
		}
		mustIs(t, err, backend.ErrLeaseHeld, "Acquire while held")
		if time.Now().After(deadline) {
			t.Fatal("lease with TTL 20ms still held after 10s")
		}
		time.Sleep(time.Millisecond) // retry backoff
	}
}

func TestTokensSurviveReleaseAndReopen(t *testing.T) {
	p, ctx := dbPath(t), context.Background()
	var last uint64
	for round := range 3 {
		b, err := Open(ctx, p)
		must(t, err, "Open")
		for range 5 {
			o := own("a")
			g, err := b.Acquire(ctx, "k", o, time.Minute)
			must(t, err, "Acquire")
			if g.Token <= last {
				t.Fatalf("round %d: token %d not greater than %d", round, g.Token, last)
			}
			last = g.Token
			must(t, b.Release(ctx, "k", o, g.Token), "Release")
		}
		// Leave one lease to expire instead of releasing it.
		g, err := b.Acquire(ctx, "k", own("x"), time.Millisecond)
		must(t, err, "Acquire")
		last = g.Token
		must(t, b.Close(), "Close")
	}
	if last != 18 {
		t.Fatalf("last token %d, want 18", last)
	}
}

func TestBootIDMismatchExpiresLeases(t *testing.T) {
	p, ctx := dbPath(t), context.Background()
	before := open(t, p)
	a := own("a")
	g, err := before.Acquire(ctx, "k", a, time.Hour)
	must(t, err, "Acquire")
	_, err = before.Claim(ctx, backend.ClaimRequest{Job: "j", ScheduledAt: time.Now(), Owner: a, TTL: time.Hour})
	must(t, err, "Claim")

	after := open(t, p, withBootID("00000000-0000-0000-0000-rebooted0000"))
	_, err = after.Get(ctx, "k")
	mustIs(t, err, backend.ErrNotFound, "Get after a reboot")
	ls, err := after.List(ctx, "", 0)
	must(t, err, "List")
	if len(ls) != 0 {
		t.Fatalf("List after a reboot: %+v", ls)
	}
	_, err = after.Renew(ctx, backend.RenewRequest{Key: "k", Owner: a, Token: g.Token, TTL: time.Hour})
	mustIs(t, err, backend.ErrLeaseLost, "Renew after a reboot")
	g2, err := after.Acquire(ctx, "k", own("b"), time.Hour)
	must(t, err, "Acquire after a reboot")
	if g2.Token != g.Token+1 {
		t.Fatalf("token after reboot %d, want %d", g2.Token, g.Token+1)
	}
	runs, err := after.ListRuns(ctx, backend.RunFilter{Job: "j"})
	must(t, err, "ListRuns")
	if len(runs) != 1 || !runs[0].Expired {
		t.Fatalf("run after a reboot: %+v, want expired", runs)
	}
}

func TestListPrefixAndOrder(t *testing.T) {
	clk := newFakeClock()
	b, ctx := open(t, dbPath(t), clk.option()), context.Background()
	keys := []string{"a/1", "a/2", "a/3", "ab", "b", "é/x", "é/y", "ê", "a", "\u00ff", "\U0010FFFF/z", "z/\U0010FFFF"}
	for _, k := range keys {
		_, err := b.Acquire(ctx, k, own("o"), time.Minute)
		must(t, err, "Acquire "+k)
	}
	_, err := b.Acquire(ctx, "a/short", own("o"), time.Second)
	must(t, err, "Acquire a/short")
	clk.advance(2 * time.Second) // a/short expires
	sort.Strings(keys)
	prefixes := []string{"", "a", "a/", "é", "é/", "\xc3", "\xc3\xa9", "\xf4\x8f\xbf\xbf", "\xff", "zz", "a/1"}
	for _, p := range prefixes {
		var want []string
		for _, k := range keys {
			if strings.HasPrefix(k, p) {
				want = append(want, k)
			}
		}
		ls, err := b.List(ctx, p, 0)
		must(t, err, "List")
		var got []string
		for _, l := range ls {
			got = append(got, l.Key)
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("List(%q) = %q, want %q", p, got, want)
		}
		if len(want) > 1 {
			ls, err := b.List(ctx, p, 1)
			must(t, err, "List limit 1")
			if len(ls) != 1 || ls[0].Key != want[0] {
				t.Errorf("List(%q, 1) = %+v, want %q", p, ls, want[0])
			}
		}
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	b, ctx := open(t, dbPath(t)), context.Background()
	a := own("a")
	long := strings.Repeat("k", backend.MaxKeyLen+1)
	calls := map[string]func() error{
		"empty key":      func() error { _, err := b.Acquire(ctx, "", a, time.Second); return err },
		"long key":       func() error { _, err := b.Acquire(ctx, long, a, time.Second); return err },
		"control key":    func() error { _, err := b.Acquire(ctx, "k\x01", a, time.Second); return err },
		"bad utf8 key":   func() error { _, err := b.Acquire(ctx, "k\xff", a, time.Second); return err },
		"zero ttl":       func() error { _, err := b.Acquire(ctx, "k", a, 0); return err },
		"tiny ttl":       func() error { _, err := b.Acquire(ctx, "k", a, time.Microsecond); return err },
		"huge ttl":       func() error { _, err := b.Acquire(ctx, "k", a, backend.MaxTTL+1); return err },
		"zero nonce":     func() error { _, err := b.Acquire(ctx, "k", backend.Owner{Instance: "a"}, time.Second); return err },
		"empty instance": func() error { _, err := b.Acquire(ctx, "k", backend.Owner{Nonce: a.Nonce}, time.Second); return err },
		"renew token 0": func() error {
			_, err := b.Renew(ctx, backend.RenewRequest{Key: "k", Owner: a, Token: 0, TTL: time.Second})
			return err
		},
		"renew bad ttl": func() error {
			_, err := b.Renew(ctx, backend.RenewRequest{Key: "k", Owner: a, Token: 1, TTL: -1})
			return err
		},
		"release token 0": func() error { return b.Release(ctx, "k", a, 0) },
		"release no key":  func() error { return b.Release(ctx, "", a, 1) },
		"get no key":      func() error { _, err := b.Get(ctx, ""); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, backend.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	g, err := b.Acquire(ctx, "k", a, time.Second)
	must(t, err, "Acquire")
	if g.Token != 1 {
		t.Fatalf("first valid Acquire got token %d, want 1: a rejected call changed the counter", g.Token)
	}
}

func TestExclusionAcrossGoroutinesAndBackends(t *testing.T) {
	p, ctx := dbPath(t), context.Background()
	backends := []*Backend{open(t, p), open(t, p), open(t, p)}
	const workers, rounds = 12, 20
	var (
		inside atomic.Int32
		mu     sync.Mutex
		tokens []uint64
		wg     sync.WaitGroup
		errs   = make(chan error, workers)
	)
	for w := range workers {
		b := backends[w%len(backends)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				o := own("w")
				var g backend.Grant
				for {
					var err error
					if g, err = b.Acquire(ctx, "excl", o, time.Minute); err == nil {
						break
					}
					if !errors.Is(err, backend.ErrLeaseHeld) {
						errs <- err
						return
					}
					time.Sleep(100 * time.Microsecond) // retry backoff
				}
				if inside.Add(1) != 1 {
					errs <- errors.New("two holders at once")
				}
				mu.Lock()
				tokens = append(tokens, g.Token)
				mu.Unlock()
				inside.Add(-1)
				if err := b.Release(ctx, "excl", o, g.Token); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(tokens) != workers*rounds {
		t.Fatalf("%d grants, want %d", len(tokens), workers*rounds)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("grant %d: token %d after %d", i, tokens[i], tokens[i-1])
		}
	}
}
