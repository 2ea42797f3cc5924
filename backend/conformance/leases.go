package conformance

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/backend"
)

func leaseChecks() []check {
	return []check{
		{"Capabilities", checkCapabilities},
		{"RefreshCapabilities", checkRefreshCapabilities},
		{"AcquireHeldGet", checkAcquireHeldGet},
		{"TokensIncreaseOver1000Handovers", checkTokens1000},
		{"TokensIncreaseAcrossReleasePruneExpiry", checkTokensAcrossPrune},
		{"RenewKeepsToken", checkRenewKeepsToken},
		{"StaleHolderCannotRenewOrRelease", checkStaleHolder},
		{"SameInstanceNameOtherNonce", checkSameName},
		{"RetriedAcquireAnswersYours", checkRetryYours},
		{"RetriedAcquireRenewsExpiry", checkRetryRenews},
		{"ExpiryLetsNextHolderIn", checkExpiry},
		{"ExclusionUnder64Goroutines", checkExclusion64},
		{"BadInputChangesNothing", checkBadInput},
		{"EndedContextIsNoAnswer", checkEndedContext},
		{"ClosedAnswersErrClosed", checkClosed},
		{"PushEvents", checkPushEvents},
		{"DurableFencing", checkDurable},
	}
}

func checkCapabilities(t T, e *env) {
	b := e.new()
	got := b.Capabilities()
	got.ReadAt = time.Time{} // when the declaration was read, not what it says
	if got != e.h.Want {
		t.Fatalf("Capabilities() = %+v, declared %+v", got, e.h.Want)
	}
	if !got.SafeFencing {
		first, second := e.h.UnsafeFencing(e.tb)
		if second > first {
			t.Errorf("SafeFencing=false declared, but the demonstration gave increasing tokens %d then %d", first, second)
		}
		t.Logf("declared unsafe fencing shown: token %d granted after %d", second, first)
	}
	if got.MinTTL > time.Microsecond {
		_, err := b.Acquire(e.ctx(), "cap/min", owner("a"), got.MinTTL/2)
		mustIs(t, err, backend.ErrInvalid, "Acquire below MinTTL")
	}
	if got.TTLGranularity > 0 {
		g, err := b.Acquire(e.ctx(), "cap/gran", owner("a"), got.MinTTL+1)
		mustNil(t, err, "Acquire")
		if g.TTL < got.MinTTL+1 || g.TTL%got.TTLGranularity != 0 {
			t.Errorf("granted TTL %v for %v is not rounded up to granularity %v", g.TTL, got.MinTTL+1, got.TTLGranularity)
		}
	}
}

func checkAcquireHeldGet(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	a, c := owner("alpha"), owner("beta")
	ttl := e.ttl(30 * time.Second)
	g, err := b.Acquire(ctx, "ns/lock/k1", a, ttl)
	mustNil(t, err, "first Acquire")
	if g.Token == 0 || g.TTL < ttl {
		t.Fatalf("grant %+v: want token > 0 and TTL ≥ %v", g, ttl)
	}
	_, err = b.Acquire(ctx, "ns/lock/k1", c, ttl)
	var held *backend.HeldError
	if !errors.As(err, &held) || !errors.Is(err, backend.ErrLeaseHeld) {
		t.Fatalf("second Acquire: got %v, want *HeldError", err)
	}
	if held.Holder.Owner != a || held.Holder.Token != g.Token || held.Holder.Key != "ns/lock/k1" {
		t.Errorf("HeldError holder = %+v, want owner %v token %d", held.Holder, a, g.Token)
	}
	l, err := b.Get(ctx, "ns/lock/k1")
	mustNil(t, err, "Get")
	if l.Owner != a || l.Token != g.Token || l.Remaining <= 0 || l.Remaining > g.TTL {
		t.Errorf("Get = %+v, want owner %v token %d and 0 < remaining ≤ %v", l, a, g.Token, g.TTL)
	}
	_, err = b.Get(ctx, "ns/lock/other")
	mustIs(t, err, backend.ErrNotFound, "Get of a free key")
	_, err = b.Acquire(ctx, "ns/lock/k2", c, ttl)
	mustNil(t, err, "Acquire k2")
	_, err = b.Acquire(ctx, "other/lock/k3", c, ttl)
	mustNil(t, err, "Acquire other/k3")
	ls, err := b.List(ctx, "ns/", 0)
	mustNil(t, err, "List")
	if len(ls) != 2 || ls[0].Key != "ns/lock/k1" || ls[1].Key != "ns/lock/k2" {
		t.Errorf("List(ns/) = %+v, want k1 and k2 in key order", ls)
	}
	ls, err = b.List(ctx, "", 1)
	mustNil(t, err, "List limit 1")
	if len(ls) != 1 {
		t.Errorf("List limit 1 returned %d leases", len(ls))
	}
	mustNil(t, b.Release(ctx, "ns/lock/k1", a, g.Token), "Release")
	_, err = b.Get(ctx, "ns/lock/k1")
	mustIs(t, err, backend.ErrNotFound, "Get after Release")
}

func checkTokens1000(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	ttl := e.ttl(30 * time.Second)
	var last uint64
	for i := range 1000 {
		o := owner([]string{"a", "b", "c"}[i%3])
		g, err := b.Acquire(ctx, "tok/k", o, ttl)
		mustNil(t, err, "Acquire")
		if g.Token <= last {
			t.Fatalf("handover %d: token %d not greater than previous %d", i, g.Token, last)
		}
		last = g.Token
		mustNil(t, b.Release(ctx, "tok/k", o, g.Token), "Release")
	}
}

func checkTokensAcrossPrune(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	ttl := e.ttl(30 * time.Second)
	a := owner("a")
	g1, err := b.Acquire(ctx, "prune/k", a, ttl)
	mustNil(t, err, "Acquire")
	mustNil(t, b.Release(ctx, "prune/k", a, g1.Token), "Release")
	// A backend without a ledger has no Prune: the token must still
	// survive the release alone.
	if l, ok := b.(backend.Ledger); ok {
		for {
			n, err := l.Prune(ctx, time.Now().Add(time.Hour), 1000)
			mustNil(t, err, "Prune")
			if n < 1000 {
				break
			}
		}
	}
	g2, err := b.Acquire(ctx, "prune/k", owner("b"), e.ttl(200*time.Millisecond))
	mustNil(t, err, "Acquire after release and prune")
	if g2.Token <= g1.Token {
		t.Fatalf("token after release+prune %d not greater than %d", g2.Token, g1.Token)
	}
	// Let it expire without release, prune again, and acquire once more.
	c := owner("c")
	var g3 backend.Grant
	eventually(t, 10*time.Second+g2.TTL, "Acquire after expiry", func() bool {
		g3, err = b.Acquire(ctx, "prune/k", c, ttl)
		return err == nil
	})
	if g3.Token <= g2.Token {
		t.Fatalf("token after expiry %d not greater than %d", g3.Token, g2.Token)
	}
}

func checkRenewKeepsToken(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	a := owner("a")
	ttl := e.ttl(30 * time.Second)
	g, err := b.Acquire(ctx, "renew/k", a, ttl)
	mustNil(t, err, "Acquire")
	for range 5 {
		r, err := b.Renew(ctx, backend.RenewRequest{Key: "renew/k", Owner: a, Token: g.Token, TTL: ttl})
		mustNil(t, err, "Renew")
		if r.Token != g.Token || r.TTL < ttl {
			t.Fatalf("Renew = %+v, want token %d and TTL ≥ %v", r, g.Token, ttl)
		}
	}
	l, err := b.Get(ctx, "renew/k")
	mustNil(t, err, "Get")
	if l.Token != g.Token || l.Owner != a {
		t.Errorf("Get after renewals = %+v, want token %d owner %v", l, g.Token, a)
	}
}

// checkEndedContext: calls whose context has already ended — cancelled
// with ErrLeaseLost as the cause, as a Locker ends a renewal it can no
// longer prove in time — answer nothing definite: an error matching
// context.Canceled (and, for a request not sent, ErrNotApplied) that may
// quote the cause but matches none of the definite answers (a Lock.Release
// whose not-sent request matched the cause ErrLeaseLost returned nil and
// left the lease held).
// The cause is the caller's reason to stop, not the backend's answer; the
// lease it was about is unchanged. (The wire checks cover a context that
// ends while the request is in flight.)
func checkEndedContext(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	a := owner("a")
	ttl := e.ttl(30 * time.Second)
	g, err := b.Acquire(ctx, "ended/k", a, ttl)
	mustNil(t, err, "Acquire")
	ended, cancel := context.WithCancelCause(ctx)
	cancel(backend.ErrLeaseLost)
	calls := []struct {
		what string
		call func() error
	}{
		{"Acquire by another owner", func() error { _, err := b.Acquire(ended, "ended/k", owner("b"), ttl); return err }},
		{"Acquire of a free key", func() error { _, err := b.Acquire(ended, "ended/free", owner("b"), ttl); return err }},
		{"Renew", func() error {
			_, err := b.Renew(ended, backend.RenewRequest{Key: "ended/k", Owner: a, Token: g.Token, TTL: ttl})
			return err
		}},
		{"Release", func() error { return b.Release(ended, "ended/k", a, g.Token) }},
	}
	for _, c := range calls {
		err := c.call()
		switch {
		case err == nil:
			t.Errorf("%s with an ended context succeeded", c.what)
		case definiteAnswer(err) != nil:
			t.Errorf("%s with a context cancelled with cause ErrLeaseLost: %v, which matches %v: the cause is not the backend's answer", c.what, err, definiteAnswer(err))
		case !errors.Is(err, context.Canceled):
			t.Errorf("%s with a cancelled context: %v, want an error matching context.Canceled (and ErrNotApplied or nothing else)", c.what, err)
		}
	}
	l, err := b.Get(ctx, "ended/k")
	mustNil(t, err, "Get after the calls with an ended context")
	if l.Owner != a || l.Token != g.Token {
		t.Errorf("after the calls with an ended context the key is held by %v token %d, want %v token %d", l.Owner, l.Token, a, g.Token)
	}
	mustNil(t, b.Release(ctx, "ended/k", a, g.Token), "Release")
}

// checkClosed: after Close every call answers ErrClosed before anything
// is sent, whatever its arguments would ask of the store — with a live
// context and with an ended one (the closed state is checked before the
// context, on every backend: internal/guard), and for a List of a prefix
// no key can start with.
func checkClosed(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	a := owner("a")
	ttl := e.ttl(30 * time.Second)
	g, err := b.Acquire(ctx, "closed/k", a, ttl)
	mustNil(t, err, "Acquire")
	at := time.Now().Truncate(time.Second)
	l, hasLedger := b.(backend.Ledger)
	var claim backend.Grant
	if hasLedger {
		claim, err = l.Claim(ctx, backend.ClaimRequest{Job: "closed", ScheduledAt: at, Owner: a, TTL: ttl, MaxEarly: time.Hour})
		mustNil(t, err, "Claim")
	}
	mustNil(t, b.Close(), "Close")
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for _, cc := range []struct {
		name string
		ctx  context.Context
	}{{"a live context", ctx}, {"an ended context", ended}} {
		ctx := cc.ctx
		calls := []namedCall{
			{"Acquire", func() error { _, err := b.Acquire(ctx, "closed/free", a, ttl); return err }},
			{"Renew", func() error {
				_, err := b.Renew(ctx, backend.RenewRequest{Key: "closed/k", Owner: a, Token: g.Token, TTL: ttl})
				return err
			}},
			{"Release", func() error { return b.Release(ctx, "closed/k", a, g.Token) }},
			{"Get", func() error { _, err := b.Get(ctx, "closed/k"); return err }},
			{"List", func() error { _, err := b.List(ctx, "closed/", 0); return err }},
			{"List of a prefix holding NUL", func() error { _, err := b.List(ctx, "closed/\x00", 0); return err }},
		}
		if n, ok := b.(backend.Notifier); ok {
			calls = append(calls, namedCall{"Wait", func() error { _, err := n.Wait(ctx, "closed/k"); return err }})
		}
		if q, ok := b.(backend.Queue); ok {
			calls = append(calls, namedCall{"AcquireQueued", func() error { _, _, err := q.AcquireQueued(ctx, "closed/free", a, ttl); return err }})
		}
		if hasLedger {
			calls = append(calls, []namedCall{
				{"Claim", func() error {
					_, err := l.Claim(ctx, backend.ClaimRequest{Job: "closed", ScheduledAt: at.Add(time.Second), Owner: a, TTL: ttl, MaxEarly: time.Hour})
					return err
				}},
				{"Heartbeat", func() error {
					return l.Heartbeat(ctx, backend.HeartbeatRequest{Job: "closed", ScheduledAt: at, Owner: a, Token: claim.Token, TTL: ttl})
				}},
				{"Finish", func() error {
					return l.Finish(ctx, backend.FinishRequest{Job: "closed", ScheduledAt: at, Owner: a, Token: claim.Token, Outcome: backend.Outcome{State: backend.Succeeded}})
				}},
				{"Reclaim", func() error {
					_, _, err := l.Reclaim(ctx, backend.ClaimRequest{Job: "closed", ScheduledAt: at, Owner: owner("b"), TTL: ttl})
					return err
				}},
				{"Abandon", func() error { _, err := l.Abandon(ctx, "closed", at); return err }},
				{"GetRun", func() error { _, err := l.GetRun(ctx, "closed", at); return err }},
				{"HighWater", func() error { _, _, err := l.HighWater(ctx, "closed"); return err }},
				{"ListRuns", func() error { _, err := l.ListRuns(ctx, backend.RunFilter{}); return err }},
				{"Prune", func() error { _, err := l.Prune(ctx, time.Now(), 10); return err }},
			}...)
		}
		if rs, ok := b.(backend.Records); ok {
			o := owner("closed")
			calls = append(calls, []namedCall{
				{"CreateRecord", func() error { _, _, err := rs.CreateRecord(ctx, createReq("closed", 1, "v", o)); return err }},
				{"ListRecords", func() error { _, err := rs.ListRecords(ctx, backend.ListRecordsRequest{Name: "closed"}); return err }},
				{"DeleteRecord", func() error {
					return rs.DeleteRecord(ctx, backend.DeleteRecordRequest{Name: "closed", Seq: 1, Owner: o})
				}},
				{"PruneRecords", func() error { _, err := rs.PruneRecords(ctx, time.Now(), 10); return err }},
			}...)
		}
		for _, c := range calls {
			if err := c.call(); !errors.Is(err, backend.ErrClosed) {
				t.Errorf("%s after Close, with %s: %v, want ErrClosed", c.what, cc.name, err)
			}
		}
	}
}

// namedCall is a call a check makes, named for its failure message.
type namedCall struct {
	what string
	call func() error
}

func checkStaleHolder(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	a, c := owner("a"), owner("b")
	short := e.ttl(200 * time.Millisecond)
	ga, err := b.Acquire(ctx, "stale/k", a, short)
	mustNil(t, err, "Acquire a")
	var gb backend.Grant
	eventually(t, 10*time.Second+short, "b acquires after a's lease expired", func() bool {
		gb, err = b.Acquire(ctx, "stale/k", c, e.ttl(30*time.Second))
		return err == nil
	})
	if gb.Token <= ga.Token {
		t.Fatalf("b's token %d not greater than a's %d", gb.Token, ga.Token)
	}
	_, err = b.Renew(ctx, backend.RenewRequest{Key: "stale/k", Owner: a, Token: ga.Token, TTL: short})
	mustIs(t, err, backend.ErrLeaseLost, "stale Renew")
	_, err = b.Renew(ctx, backend.RenewRequest{Key: "stale/k", Owner: a, Token: gb.Token, TTL: short})
	mustIs(t, err, backend.ErrLeaseLost, "Renew with the new token but the stale owner")
	mustIs(t, b.Release(ctx, "stale/k", a, ga.Token), backend.ErrLeaseLost, "stale Release")
	mustIs(t, b.Release(ctx, "stale/k", a, gb.Token), backend.ErrLeaseLost, "Release with the new token but the stale owner")
	_, err = b.Renew(ctx, backend.RenewRequest{Key: "stale/k", Owner: c, Token: ga.Token, TTL: short})
	mustIs(t, err, backend.ErrLeaseLost, "Renew by the holder with a stale token")
	l, err := b.Get(ctx, "stale/k")
	mustNil(t, err, "Get")
	if l.Owner != c || l.Token != gb.Token {
		t.Fatalf("after stale calls the holder is %+v, want b with token %d", l, gb.Token)
	}
}

func checkSameName(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	first := owner("twin")
	second := backend.Owner{Instance: "twin", Nonce: backend.NewNonce()}
	ttl := e.ttl(30 * time.Second)
	g, err := b.Acquire(ctx, "twin/k", first, ttl)
	mustNil(t, err, "Acquire")
	_, err = b.Acquire(ctx, "twin/k", second, ttl)
	mustIs(t, err, backend.ErrLeaseHeld, "Acquire by the same instance name with another nonce (not re-entrant)")
	_, err = b.Renew(ctx, backend.RenewRequest{Key: "twin/k", Owner: second, Token: g.Token, TTL: ttl})
	mustIs(t, err, backend.ErrLeaseLost, "Renew by the same instance name with another nonce")
	mustIs(t, b.Release(ctx, "twin/k", second, g.Token), backend.ErrLeaseLost, "Release by the same instance name with another nonce")
	l, err := b.Get(ctx, "twin/k")
	mustNil(t, err, "Get")
	if l.Owner != first {
		t.Fatalf("holder is %v, want %v", l.Owner, first)
	}
}

func checkRetryYours(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	a := owner("a")
	ttl := e.ttl(30 * time.Second)
	g1, err := b.Acquire(ctx, "retry/k", a, ttl)
	mustNil(t, err, "Acquire")
	g2, err := b.Acquire(ctx, "retry/k", a, ttl)
	mustNil(t, err, "retried Acquire with the same nonce")
	if g2.Token != g1.Token {
		t.Fatalf("retried Acquire answered token %d, want the same grant %d", g2.Token, g1.Token)
	}
	mustNil(t, b.Release(ctx, "retry/k", a, g1.Token), "Release")
	g3, err := b.Acquire(ctx, "retry/k", owner("b"), ttl)
	mustNil(t, err, "Acquire after release")
	if g3.Token != g1.Token+1 && g3.Token <= g1.Token {
		t.Fatalf("token after the retried grant %d, want > %d", g3.Token, g1.Token)
	}
}

// checkRetryRenews: an Acquire answered "yours" (a retry of an applied
// request, same owner nonce) renews the lease to ttl from now by the
// backend's clock. A backend that returned the old grant unchanged would
// leave the lease expiring at the first attempt's apply time + TTL while
// the caller counts its deadline from the retry (issue #14 item 1).
func checkRetryRenews(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	a := owner("a")
	ttl := e.ttl(2 * time.Second)
	t0 := time.Now()
	g1, err := b.Acquire(ctx, "retryrenew/k", a, ttl)
	mustNil(t, err, "Acquire")
	time.Sleep(time.Until(t0.Add(ttl / 2))) // the scenario: half the lease passes
	s1 := time.Now()
	g2, err := b.Acquire(ctx, "retryrenew/k", a, ttl)
	mustNil(t, err, "retried Acquire with the same nonce")
	if g2.Token != g1.Token {
		t.Fatalf("retried Acquire answered token %d, want the same grant %d", g2.Token, g1.Token)
	}
	if g2.TTL < ttl {
		t.Fatalf("retried Acquire reports TTL %v, want at least the %v asked for", g2.TTL, ttl)
	}
	l, err := b.Get(ctx, "retryrenew/k")
	mustNil(t, err, "Get after the retried Acquire")
	// By the backend's clock the lease now ends ttl after the retry was
	// applied, so at least ttl − (time since the retry was sent) remains;
	// ttl/4 allows for the read's own latency on a loaded machine, and a
	// backend that reports what remains in whole units (etcd: seconds,
	// rounded down) may report up to one unit less.
	if want := ttl - time.Since(s1) - ttl/4 - e.h.Want.TTLGranularity; l.Remaining < want {
		t.Fatalf("after a retried Acquire answered yours, %v remain; want at least %v: the retry did not renew the lease to ttl %v from now",
			l.Remaining, want, ttl)
	}
	// Past the first grant's own expiry, the lease must still be held.
	time.Sleep(time.Until(t0.Add(ttl + ttl/8)))
	if time.Since(s1) < ttl*7/8 {
		_, err = b.Acquire(ctx, "retryrenew/k", owner("b"), ttl)
		mustIs(t, err, backend.ErrLeaseHeld, "another owner's Acquire after the first grant's TTL but within the renewed one")
	} else {
		t.Logf("machine too slow to probe between the two expiries (%v since the retry)", time.Since(s1))
	}
	mustNil(t, b.Release(ctx, "retryrenew/k", a, g1.Token), "Release")
}

func checkExpiry(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	short := e.ttl(150 * time.Millisecond)
	ga, err := b.Acquire(ctx, "exp/k", owner("a"), short)
	mustNil(t, err, "Acquire")
	start := time.Now()
	_, err = b.Acquire(ctx, "exp/k", owner("b"), short)
	if err == nil && time.Since(start) < short/2 {
		t.Fatalf("second Acquire succeeded while the first lease (TTL %v) was live", short)
	}
	c := owner("c")
	var gc backend.Grant
	eventually(t, 10*time.Second+short, "Acquire after expiry", func() bool {
		gc, err = b.Acquire(ctx, "exp/k", c, e.ttl(30*time.Second))
		return err == nil
	})
	if gc.Token <= ga.Token {
		t.Fatalf("token after expiry %d not greater than %d", gc.Token, ga.Token)
	}
	_, err = b.Get(ctx, "exp/k")
	mustNil(t, err, "Get")
}

func checkExclusion64(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	ttl := e.ttl(30 * time.Second)
	const workers, rounds = 64, 8
	var (
		mu     sync.Mutex
		inside int
		tokens []uint64
		wg     sync.WaitGroup
		errs   = make(chan error, workers)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				o := owner("w" + string(rune('a'+w%26)))
				var g backend.Grant
				backoff := time.Millisecond
				for {
					var err error
					g, err = b.Acquire(ctx, "excl/k", o, ttl)
					if err == nil {
						break
					}
					if !errors.Is(err, backend.ErrLeaseHeld) {
						errs <- err
						return
					}
					if ctx.Err() != nil {
						errs <- ctx.Err()
						return
					}
					// Retry backoff, growing so 63 waiters do not flood a
					// networked backend with attempts: up to 64 ms, so
					// that a handover still has a waiter retrying within
					// about a millisecond of the release, while the failed
					// attempts no longer starve the holder's own release
					// (at 16 ms the check took 70 s on ZooKeeper under
					// -race, 19 s at 64 ms).
					time.Sleep(backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1)))
					backoff = min(backoff*2, 64*time.Millisecond)
				}
				mu.Lock()
				inside++
				if inside != 1 {
					errs <- errors.New("two holders inside the critical section")
				}
				tokens = append(tokens, g.Token)
				mu.Unlock()
				runtime.Gosched() // give an overlapping holder the chance to show
				mu.Lock()
				inside--
				mu.Unlock()
				if err := b.Release(ctx, "excl/k", o, g.Token); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("worker: %v", err)
	}
	if len(tokens) != workers*rounds {
		t.Fatalf("%d grants, want %d", len(tokens), workers*rounds)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("grant %d got token %d after %d", i, tokens[i], tokens[i-1])
		}
	}
}

func checkBadInput(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	a := owner("a")
	ttl := e.ttl(30 * time.Second)
	long := strings.Repeat("k", backend.MaxKeyLen+1)
	cases := []struct {
		name, field string
		call        func() error
	}{
		{"empty key", "key", func() error { _, err := b.Acquire(ctx, "", a, ttl); return err }},
		{"oversized key", "key", func() error { _, err := b.Acquire(ctx, long, a, ttl); return err }},
		{"control char in key", "key", func() error { _, err := b.Acquire(ctx, "bad\x00key", a, ttl); return err }},
		{"invalid utf-8 key", "key", func() error { _, err := b.Acquire(ctx, "bad\xffkey", a, ttl); return err }},
		{"zero ttl", "ttl", func() error { _, err := b.Acquire(ctx, "bad/k", a, 0); return err }},
		{"negative ttl", "ttl", func() error { _, err := b.Acquire(ctx, "bad/k", a, -time.Second); return err }},
		{"absurd ttl", "ttl", func() error { _, err := b.Acquire(ctx, "bad/k", a, backend.MaxTTL+time.Second); return err }},
		{"empty instance", "instance", func() error {
			_, err := b.Acquire(ctx, "bad/k", backend.Owner{Nonce: backend.NewNonce()}, ttl)
			return err
		}},
		{"zero nonce", "nonce", func() error { _, err := b.Acquire(ctx, "bad/k", backend.Owner{Instance: "a"}, ttl); return err }},
		{"renew token 0", "token", func() error {
			_, err := b.Renew(ctx, backend.RenewRequest{Key: "bad/k", Owner: a, Token: 0, TTL: ttl})
			return err
		}},
		{"release token 0", "token", func() error { return b.Release(ctx, "bad/k", a, 0) }},
	}
	l, hasLedger := b.(backend.Ledger)
	if hasLedger {
		cases = append(cases, []struct {
			name, field string
			call        func() error
		}{
			{"claim empty job", "job", func() error {
				_, err := l.Claim(ctx, backend.ClaimRequest{ScheduledAt: time.Now(), Owner: a, TTL: ttl})
				return err
			}},
			{"claim zero instant", "instant", func() error {
				_, err := l.Claim(ctx, backend.ClaimRequest{Job: "bad", Owner: a, TTL: ttl})
				return err
			}},
			{"claim zero ttl", "ttl", func() error {
				_, err := l.Claim(ctx, backend.ClaimRequest{Job: "bad", ScheduledAt: time.Now(), Owner: a})
				return err
			}},
			{"claim negative max late", "max late", func() error {
				_, err := l.Claim(ctx, backend.ClaimRequest{Job: "bad", ScheduledAt: time.Now(), Owner: a, TTL: ttl, MaxLate: -time.Second})
				return err
			}},
			{"finish bad state", "state", func() error {
				return l.Finish(ctx, backend.FinishRequest{Job: "bad", ScheduledAt: time.Now(), Owner: a, Token: 1, Outcome: backend.Outcome{State: "exploded"}})
			}},
			{"prune zero batch", "batch", func() error { _, err := l.Prune(ctx, time.Now(), 0); return err }},
			{"list runs of a job with a control character", "job", func() error {
				_, err := l.ListRuns(ctx, backend.RunFilter{Job: "bad\x00job"})
				return err
			}},
		}...)
	}
	if mt := e.h.Want.MinTTL; mt > time.Microsecond {
		cases = append(cases, struct {
			name, field string
			call        func() error
		}{"ttl below minimum", "ttl", func() error { _, err := b.Acquire(ctx, "bad/k", a, mt/2); return err }})
	}
	for _, c := range cases {
		err := c.call()
		if !errors.Is(err, backend.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: error %q does not name the field %q", c.name, err, c.field)
		}
	}
	ls, err := b.List(ctx, "", 0)
	mustNil(t, err, "List")
	var runs []backend.Run
	if hasLedger {
		runs, err = l.ListRuns(ctx, backend.RunFilter{})
		mustNil(t, err, "ListRuns")
	}
	if len(ls) != 0 || len(runs) != 0 {
		t.Errorf("rejected calls changed the backend: %d leases, %d runs", len(ls), len(runs))
	}
}

func checkPushEvents(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	n, ok := b.(backend.Notifier)
	if !e.h.Want.PushEvents {
		t.Logf("backend declares no push events (implements Notifier: %v); waiters poll", ok)
		return
	}
	if !ok {
		t.Fatalf("PushEvents declared but %T does not implement backend.Notifier", b)
	}
	a := owner("a")
	g, err := b.Acquire(ctx, "push/k", a, e.ttl(time.Minute))
	mustNil(t, err, "Acquire")
	ch, err := n.Wait(ctx, "push/k")
	mustNil(t, err, "Wait")
	select {
	case <-ch:
		t.Fatalf("Wait fired while the key was still held and not released")
	default:
	}
	mustNil(t, b.Release(ctx, "push/k", a, g.Token), "Release")
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no release event within 10s")
	}
}

func checkDurable(t T, e *env) {
	if !e.h.Want.DurableFencing {
		t.Logf("backend declares no durable fencing")
		return
	}
	b := e.new()
	ctx := e.ctx()
	a := owner("a")
	g, err := b.Acquire(ctx, "dur/k", a, e.ttl(30*time.Second))
	mustNil(t, err, "Acquire")
	mustNil(t, b.Release(ctx, "dur/k", a, g.Token), "Release")
	b2 := e.h.Reopen(e.tb, b)
	e.tb.Cleanup(func() { _ = b2.Close() })
	g2, err := b2.Acquire(ctx, "dur/k", owner("b"), e.ttl(30*time.Second))
	mustNil(t, err, "Acquire after reopen")
	if g2.Token <= g.Token {
		t.Fatalf("token after reopen %d not greater than %d", g2.Token, g.Token)
	}
}
