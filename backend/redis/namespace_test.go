package redis_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/internal/testserver"
	"github.com/leasehold/leasehold/schedule"
)

// namespaceUser creates the ACL user of docs/namespaces.md (Redis): keys
// under prefix, the release channels of prefix, no dangerous commands except
// INFO and CONFIG GET (read by the backend to compute its capabilities).
func namespaceUser(t *testing.T, admin *goredis.Client, user, password, prefix string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">" + password,
		"~" + prefix + "*", channelRule(prefix), "+@all", "-@dangerous", "+info", "+config|get"}
	if err := admin.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", user, err)
	}
}

// channelRule allows the release channels of a backend with prefix: the
// release script PUBLISHes on <prefix>released:{K}, which the glob matches,
// and the backend PSUBSCRIBEs to the pattern <prefix>released:{*, which
// Redis allows only when it is literally an allowed pattern.
func channelRule(prefix string) string { return "&" + prefix + "released:{*" }

// userClient connects as user.
func userClient(t testing.TB, addr, user, password string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, Username: user, Password: password, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// isNoPerm reports whether the server refused err's command by ACL: NOPERM,
// or (for a key a script touches without declaring it) an ERR saying the
// user "can't access" it.
func isNoPerm(err error) bool {
	return err != nil && (strings.HasPrefix(err.Error(), "NOPERM") || strings.Contains(err.Error(), "can't access"))
}

// TestNamespaceConfinedByACL: a user whose ACL allows the keys and channels
// of prefix "lhA:" runs the whole conformance suite there (each backend
// under a fresh "lhA:tN:" prefix), and the server refuses it namespace B's
// keys and channels.
func TestNamespaceConfinedByACL(t *testing.T) {
	srv := testserver.Redis(t)
	admin := client(t, srv.Addr())
	namespaceUser(t, admin, "app_a", "pw-a", "lhA:")
	namespaceUser(t, admin, "app_b", "pw-b", "lhB:")

	var n atomic.Int64
	openAs := func(t testing.TB, user, password, prefix string) *redis.Backend {
		b, err := redis.New(userClient(t, srv.Addr(), user, password), redis.WithPrefix(prefix))
		if err != nil {
			t.Fatalf("redis.New as %s with prefix %s: %v", user, prefix, err)
		}
		return b
	}
	t.Run("conformance in A", func(t *testing.T) {
		conformance.Run(t, conformance.Harness{
			New: func(t testing.TB) backend.Leases {
				p := fmt.Sprintf("lhA:t%d:", n.Add(1))
				if err := admin.Do(context.Background(), "ACL", "SETUSER", "app_a", channelRule(p)).Err(); err != nil {
					t.Fatalf("ACL SETUSER app_a %s: %v", channelRule(p), err)
				}
				return openAs(t, "app_a", "pw-a", p)
			},
			Want: want(false),
		})
	})

	ctx := context.Background()
	// B uses its namespace.
	bB := openAs(t, "app_b", "pw-b", "lhB:")
	defer bB.Close()
	lkB, err := leasehold.NewLocker(bB, leasehold.WithNamespace("b"))
	if err != nil {
		t.Fatal(err)
	}
	lB, err := lkB.TryAcquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer lB.Release(ctx)
	bKey := "lhB:lease:{" + leasehold.LockKey("b", "orders") + "}"

	// A works in A: a lock, a claimed and finished occurrence.
	bA := openAs(t, "app_a", "pw-a", "lhA:")
	defer bA.Close()
	if c := bA.Capabilities(); !c.SafeFencing {
		t.Fatalf("confined user: capabilities %+v, want SafeFencing (CONFIG GET allowed)", c)
	}
	lkA, err := leasehold.NewLocker(bA, leasehold.WithNamespace("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := lkA.Do(ctx, "orders", func(context.Context, leasehold.Token) error { return nil }); err != nil {
		t.Fatalf("A locks in A: %v", err)
	}
	c, err := schedule.ClaimOccurrence(ctx, bA, "report", time.Now().Add(-time.Second), schedule.ClaimOptions{Instance: "a"})
	if err != nil {
		t.Fatalf("A claims in A: %v", err)
	}
	if err := c.Finish(ctx, nil); err != nil {
		t.Fatalf("A finishes in A: %v", err)
	}

	// A in B: a backend opened as A over B's prefix, and raw commands on
	// B's keys and channels, are refused by the server.
	intruder, err := redis.New(userClient(t, srv.Addr(), "app_a", "pw-a"), redis.WithPrefix("lhB:"))
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Close()
	if _, err := intruder.Acquire(ctx, leasehold.LockKey("b", "orders"), backend.Owner{Instance: "a", Nonce: backend.NewNonce()}, time.Second); !strings.Contains(fmt.Sprint(err), "NOPERM") {
		t.Errorf("Acquire in B as A: %v, want NOPERM", err)
	}
	if _, err := intruder.Get(ctx, leasehold.LockKey("b", "orders")); !strings.Contains(fmt.Sprint(err), "NOPERM") {
		t.Errorf("Get in B as A: %v, want NOPERM", err)
	}
	if _, err := intruder.Claim(ctx, backend.ClaimRequest{Job: "report", ScheduledAt: backend.Instant(time.Now()), Owner: backend.Owner{Instance: "a", Nonce: backend.NewNonce()}, TTL: time.Second}); !strings.Contains(fmt.Sprint(err), "NOPERM") {
		t.Errorf("Claim in B as A: %v, want NOPERM", err)
	}
	a := userClient(t, srv.Addr(), "app_a", "pw-a")
	for name, err := range map[string]error{
		"GET":                   a.Get(ctx, bKey).Err(),
		"DEL":                   a.Del(ctx, bKey).Err(),
		"SET":                   a.Set(ctx, bKey, "x", 0).Err(),
		"EVAL":                  a.Eval(ctx, "return redis.call('DEL', KEYS[1])", []string{bKey}).Err(),
		"EVAL (undeclared key)": a.Eval(ctx, "return redis.call('DEL', ARGV[1])", []string{"lhA:x"}, bKey).Err(),
		"PUBLISH":               a.Publish(ctx, "lhB:released:{b:lock:orders}", "x").Err(),
		"FLUSHALL":              a.FlushAll(ctx).Err(),
	} {
		if !isNoPerm(err) {
			t.Errorf("%s on B's keys as A: %v, want NOPERM", name, err)
		}
	}
	ps := a.Subscribe(ctx, "lhB:released:{b:lock:orders}")
	defer ps.Close()
	if _, err := ps.Receive(ctx); !isNoPerm(err) {
		t.Errorf("SUBSCRIBE to B's channel as A: %v, want NOPERM", err)
	}
	// B's lease is untouched.
	if l, err := bB.Get(ctx, leasehold.LockKey("b", "orders")); err != nil || l.Token != uint64(lB.Token()) {
		t.Fatalf("B's lease after A's attempts: %+v, %v", l, err)
	}
}

// TestNamespaceACLWithExpiryEvents: on a server that sends expired-key
// events, a confined user may not subscribe to their server-wide channel.
// The backend goes on without them: release events still wake waiters,
// and expiry is still noticed (by the holder's remaining TTL).
func TestNamespaceACLWithExpiryEvents(t *testing.T) {
	srv := testserver.Redis(t, "--notify-keyspace-events", "Ex")
	admin := client(t, srv.Addr())
	namespaceUser(t, admin, "app_a", "pw-a", "lhA:")
	b, err := redis.New(userClient(t, srv.Addr(), "app_a", "pw-a"), redis.WithPrefix("lhA:"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wake := func(key string, ttl time.Duration, release bool) time.Duration {
		t.Helper()
		o := backend.Owner{Instance: "x", Nonce: backend.NewNonce()}
		g, err := b.Acquire(ctx, key, o, ttl)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := b.Wait(ctx, key)
		if err != nil {
			t.Fatalf("Wait %s: %v", key, err)
		}
		start := time.Now()
		if release {
			if err := b.Release(ctx, key, o, g.Token); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("waiter on %s not woken (release %v)", key, release)
		}
		return time.Since(start)
	}
	t.Logf("woken %v after expiry of a 300ms lease", wake("expires", 300*time.Millisecond, false))
	// Each later Wait must still work: a refused subscription must not
	// leave the notifier waiting for a confirmation that never comes.
	for i := range 3 {
		t.Logf("woken %v after a release", wake(fmt.Sprintf("released%d", i), time.Minute, true))
	}
}

// TestNamespaceACLWithoutPatternSubscription: an ACL that allows the keys
// but not the literal pattern the backend PSUBSCRIBEs to (here "&lhA:*")
// must not hang waiters: Wait fails with NOPERM instead of waiting for a
// confirmation that never comes, and an Acquire on a held key still gets it
// after its holder releases it (whether it started before or after the
// release), by polling.
func TestNamespaceACLWithoutPatternSubscription(t *testing.T) {
	srv := testserver.Redis(t)
	admin := client(t, srv.Addr())
	if err := admin.Do(context.Background(), "ACL", "SETUSER", "app_a", "reset", "on", ">pw-a",
		"~lhA:*", "&lhA:*", "+@all", "-@dangerous", "+info", "+config|get").Err(); err != nil {
		t.Fatal(err)
	}
	b, err := redis.New(userClient(t, srv.Addr(), "app_a", "pw-a"), redis.WithPrefix("lhA:"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.Wait(ctx, "k"); !strings.Contains(fmt.Sprint(err), "NOPERM") {
		t.Fatalf("Wait without the pattern in the ACL: %v, want NOPERM", err)
	}
	lk, err := leasehold.NewLocker(b, leasehold.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	held, err := lk.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := lk.Acquire(ctx, "k")
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("blocked Acquire after the release: %v", err)
	}
}
