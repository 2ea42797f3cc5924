package redis_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/internal/nsrecipe"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/schedule"
)

// recipeServer starts a redis-server with an ACL file (the recipe of
// docs/namespaces.md ends with ACL SAVE) and requirepass set, and returns
// it with a client authenticated as the default user (the operator).
func recipeServer(t *testing.T, extra ...string) (*testserver.Server, *goredis.Client) {
	t.Helper()
	aclfile := filepath.Join(t.TempDir(), "users.acl")
	if err := os.WriteFile(aclfile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := testserver.Redis(t, append([]string{"--aclfile", aclfile}, extra...)...)
	if err := client(t, srv.Addr()).ConfigSet(context.Background(), "requirepass", adminPassword).Err(); err != nil {
		t.Fatalf("CONFIG SET requirepass: %v", err)
	}
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Password: adminPassword, ContextTimeoutEnabled: true})
	t.Cleanup(func() { admin.Close() })
	return srv, admin
}

// adminPassword is the default user's password (requirepass) of
// recipeServer: what a tenant must never learn.
const adminPassword = "ADMIN-requirepass-secret"

// applyRecipe runs, as the operator, the commands of docs/namespaces.md
// (Redis) exactly as the page prints them, with the placeholder passwords
// replaced by pw-a and pw-b: users app_a (prefix lhA:) and app_b (lhB:).
func applyRecipe(t *testing.T, admin *goredis.Client) {
	t.Helper()
	cmds, err := nsrecipe.ShellCommands("Redis", strings.NewReplacer("A-LONG-RANDOM-PASSWORD", "pw-a", "B-LONG-RANDOM-PASSWORD", "pw-b"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		args := make([]any, len(c))
		for i, w := range c {
			args[i] = w
		}
		if err := admin.Do(context.Background(), args...).Err(); err != nil {
			t.Fatalf("recipe command %q: %v", c, err)
		}
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
	return err != nil && (strings.Contains(err.Error(), "NOPERM") || strings.Contains(err.Error(), "can't access"))
}

// TestNamespaceConfinedByACL: a user whose ACL allows the keys and channels
// of prefix "lhA:" runs the whole conformance suite there (each backend
// under a fresh "lhA:tN:" prefix), and the server refuses it namespace B's
// keys and channels.
func TestNamespaceConfinedByACL(t *testing.T) {
	srv, admin := recipeServer(t)
	applyRecipe(t, admin)

	var n atomic.Int64
	openAs := func(t testing.TB, user, password, prefix string) *redis.Backend {
		b, err := redis.New(userClient(t, srv.Addr(), user, password), redis.WithPrefix(prefix))
		if err != nil {
			t.Fatalf("redis.New as %s with prefix %s: %v", user, prefix, err)
		}
		return b
	}
	// prefixInA returns a fresh prefix in A, its release channels allowed.
	prefixInA := func(t testing.TB) string {
		p := fmt.Sprintf("lhA:t%d:", n.Add(1))
		if err := admin.Do(context.Background(), "ACL", "SETUSER", "app_a", channelRule(p)).Err(); err != nil {
			t.Fatalf("ACL SETUSER app_a %s: %v", channelRule(p), err)
		}
		return p
	}
	t.Run("conformance in A", func(t *testing.T) {
		conformance.Run(t, conformance.Harness{
			New: func(t testing.TB) backend.Leases {
				return openAs(t, "app_a", "pw-a", prefixInA(t))
			},
			NoWire: "TestConformance runs the wire checks on this backend; this run is about the namespace",
			// The process faults, with every process confined to A too.
			Process: func(t testing.TB) faultkit.Kit {
				return faultKitIn(srv.Addr(), url.UserPassword("app_a", "pw-a"), prefixInA(t))
			},
			// The recipe grants no CONFIG GET: what it would tell
			// is declared unknown (false).
			Want: func() backend.Capabilities { c := want(false); c.SafeFencing = false; return c }(),
			// What the tenant cannot rule out: the server evicting the
			// fencing counter (maxmemory-policy is not noeviction), shown
			// by the operator deleting it as an eviction would.
			UnsafeFencing: func(t testing.TB) (uint64, uint64) {
				if err := admin.Do(context.Background(), "ACL", "SETUSER", "app_a", channelRule("lhA:evicted:")).Err(); err != nil {
					t.Fatal(err)
				}
				b := openAs(t, "app_a", "pw-a", "lhA:evicted:")
				defer b.Close()
				ctx := context.Background()
				grant := func() uint64 {
					o := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
					g, err := b.Acquire(ctx, "k", o, time.Minute)
					if err != nil {
						t.Fatal(err)
					}
					if err := b.Release(ctx, "k", o, g.Token); err != nil {
						t.Fatal(err)
					}
					return g.Token
				}
				first := grant()
				if err := admin.Del(ctx, "lhA:evicted:token:{k}").Err(); err != nil {
					t.Fatal(err)
				}
				return first, grant()
			},
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
	if c := bA.Capabilities(); c.SafeFencing || c.DurableFencing {
		t.Fatalf("confined user: capabilities %+v, want SafeFencing and DurableFencing declared unknown (false): the recipe grants no CONFIG GET", c)
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
	srv, admin := recipeServer(t, "--notify-keyspace-events", "Ex")
	applyRecipe(t, admin)
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
		"~lhA:*", "&lhA:*", "+@all", "-@dangerous", "+info").Err(); err != nil {
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

// TestNamespaceRecipeRevealsNoSecret runs the recipe of docs/namespaces.md
// as written on a server with requirepass: tenant A must be refused every
// command that would show it a password (the default user's, or another
// tenant's hash), and — even with B's owner and tokens — reading,
// renewing, releasing or taking B's lease and reading or changing B's
// runs. A's own backend still opens; what it cannot read (CONFIG GET) is
// declared unknown, not claimed.
func TestNamespaceRecipeRevealsNoSecret(t *testing.T) {
	srv, admin := recipeServer(t)
	applyRecipe(t, admin)
	ctx := context.Background()
	a := userClient(t, srv.Addr(), "app_a", "pw-a")
	for _, cmd := range [][]any{
		{"CONFIG", "GET", "requirepass"},
		{"CONFIG", "GET", "masterauth"},
		{"CONFIG", "GET", "*"},
		{"ACL", "LIST"},
		{"ACL", "GETUSER", "default"},
		{"ACL", "GETUSER", "app_b"},
		{"CLIENT", "LIST"},
		{"MONITOR"},
	} {
		res, err := a.Do(ctx, cmd...).Result()
		if leaked := fmt.Sprint(res); strings.Contains(leaked, adminPassword) || strings.Contains(leaked, "pw-b") {
			t.Errorf("%v as A revealed a password: %.200s", cmd, leaked)
		}
		if !isNoPerm(err) {
			t.Errorf("%v as A: %v, %.100s; want NOPERM", cmd, err, fmt.Sprint(res))
		}
	}

	bB, err := redis.New(userClient(t, srv.Addr(), "app_b", "pw-b"), redis.WithPrefix("lhB:"))
	if err != nil {
		t.Fatal(err)
	}
	defer bB.Close()
	intruder, err := redis.New(userClient(t, srv.Addr(), "app_a", "pw-a"), redis.WithPrefix("lhB:"))
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Close()
	nsrecipe.CheckConfined(t, bB, intruder, leasehold.LockKey("b", "billing/nightly"), "b:billing/nightly", isNoPerm)

	bA, err := redis.New(userClient(t, srv.Addr(), "app_a", "pw-a"), redis.WithPrefix("lhA:"))
	if err != nil {
		t.Fatalf("A opens its own prefix: %v", err)
	}
	defer bA.Close()
	if c := bA.Capabilities(); c.DurableFencing {
		t.Errorf("A's capabilities %+v: DurableFencing declared although A cannot read the server's configuration", c)
	}
}
