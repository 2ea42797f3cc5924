package zookeeper_test

import (
	"context"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/zookeeper"
	"github.com/leasehold/leasehold/internal/nsrecipe"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/schedule"
)

// applyRecipe runs the zkCli commands of docs/namespaces.md (ZooKeeper) as
// printed there, through conn (as the super user, or on a fresh server
// whose root is open), with "<hash-a>" and "<hash-b>" replaced by the
// digests of users app_a and app_b and their passwords.
func applyRecipe(t *testing.T, conn *zk.Conn, passwords map[string]string) {
	t.Helper()
	digest := func(user string) string {
		h := sha1.Sum([]byte(user + ":" + passwords[user]))
		return base64.StdEncoding.EncodeToString(h[:])
	}
	cmds, err := nsrecipe.ShellCommands("ZooKeeper", strings.NewReplacer("<hash-a>", digest("app_a"), "<hash-b>", digest("app_b")))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		switch {
		case c[0] == "create" && len(c) == 2: // zkCli's default ACL: world:anyone:cdrwa
			_, err = conn.Create(c[1], nil, 0, zk.WorldACL(zk.PermAll))
		case c[0] == "setAcl" && len(c) == 3:
			var acl zk.ACL
			if acl, err = parseACL(c[2]); err == nil {
				_, err = conn.SetACL(c[1], []zk.ACL{acl}, -1)
			}
		default:
			err = errors.New("not a zkCli command the test knows")
		}
		if err != nil {
			t.Fatalf("recipe command %q: %v", c, err)
		}
	}
}

// parseACL parses zkCli's scheme:id:perms (digest ids hold a colon).
func parseACL(s string) (zk.ACL, error) {
	i, j := strings.Index(s, ":"), strings.LastIndex(s, ":")
	if i < 0 || i == j {
		return zk.ACL{}, fmt.Errorf("ACL %q: want scheme:id:perms", s)
	}
	var perms int32
	for _, p := range s[j+1:] {
		bit, ok := map[rune]int32{'c': zk.PermCreate, 'd': zk.PermDelete, 'r': zk.PermRead, 'w': zk.PermWrite, 'a': zk.PermAdmin}[p]
		if !ok {
			return zk.ACL{}, fmt.Errorf("ACL %q: unknown permission %q", s, p)
		}
		perms |= bit
	}
	return zk.ACL{Scheme: s[:i], ID: s[i+1 : j], Perms: perms}, nil
}

// TestNamespaceConfinedByDigestACL: tenant roots /tenants/a and /tenants/b,
// each readable and writable only by its digest user, under a /tenants that
// tenants may only read (docs/namespaces.md, ZooKeeper). User a works in
// /tenants/a and is refused everything in /tenants/b.
func TestNamespaceConfinedByDigestACL(t *testing.T) {
	t.Parallel()
	srv := testserver.ZooKeeper(t)
	admin := connectPlain(t, srv.Addr())
	applyRecipe(t, admin, map[string]string{"app_a": "pw-a", "app_b": "pw-b"})
	ctx := context.Background()

	bB, err := zookeeper.Open(context.Background(), "zk://app_b:pw-b@"+srv.Addr()+"/tenants/b?session_timeout=10s")
	if err != nil {
		t.Fatalf("open /tenants/b as b: %v", err)
	}
	defer bB.Close()
	lkB, err := leasehold.NewLocker(bB, leasehold.WithNamespace("b"), leasehold.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lB, err := lkB.TryAcquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer lB.Release(ctx)

	bA, err := zookeeper.Open(context.Background(), "zk://app_a:pw-a@"+srv.Addr()+"/tenants/a?session_timeout=10s")
	if err != nil {
		t.Fatalf("open /tenants/a as a: %v", err)
	}
	defer bA.Close()
	lkA, err := leasehold.NewLocker(bA, leasehold.WithNamespace("a"), leasehold.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := lkA.Do(ctx, "orders", func(context.Context, leasehold.Token) error { return nil }); err != nil {
		t.Fatalf("a locks in /tenants/a: %v", err)
	}
	c, err := schedule.ClaimOccurrence(ctx, bA, "report", time.Now().Add(-time.Second), schedule.ClaimOptions{Instance: "a"})
	if err != nil {
		t.Fatalf("a claims in /tenants/a: %v", err)
	}
	if err := c.Finish(ctx, nil); err != nil {
		t.Fatalf("a finishes in /tenants/a: %v", err)
	}

	// a in /tenants/b: refused.
	// Opening finds B's nodes in place (exists needs no permission) and
	// creates nothing; every operation is then refused.
	intruder, err := zookeeper.Open(context.Background(), "zk://app_a:pw-a@"+srv.Addr()+"/tenants/b?session_timeout=10s")
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Close()
	if _, err := intruder.Acquire(ctx, leasehold.LockKey("b", "orders"), backend.Owner{Instance: "a", Nonce: backend.NewNonce()}, 10*time.Second); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("Acquire in /tenants/b as a: %v, want ErrNoAuth", err)
	}
	if _, err := intruder.Get(ctx, leasehold.LockKey("b", "orders")); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("Get in /tenants/b as a: %v, want ErrNoAuth", err)
	}
	if _, err := intruder.Claim(ctx, backend.ClaimRequest{Job: "report", ScheduledAt: backend.Instant(time.Now()), Owner: backend.Owner{Instance: "a", Nonce: backend.NewNonce()}, TTL: 10 * time.Second}); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("Claim in /tenants/b as a: %v, want ErrNoAuth", err)
	}
	nsrecipe.CheckConfined(t, bB, intruder, leasehold.LockKey("b", "billing/nightly"), "b:billing/nightly", func(err error) bool {
		return errors.Is(err, zk.ErrNoAuth)
	})
	a := bA.Conn()
	if _, _, err := a.Children("/tenants/b/locks"); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("list /tenants/b/locks as a: %v, want ErrNoAuth", err)
	}
	if _, _, err := a.Get("/tenants/b/jobs"); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("read /tenants/b/jobs as a: %v, want ErrNoAuth", err)
	}
	if _, err := a.Create("/tenants/b/locks/intruder", nil, 0, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("create under /tenants/b/locks as a: %v, want ErrNoAuth", err)
	}
	if _, err := a.Create("/tenants/c", nil, 0, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("create /tenants/c as a: %v, want ErrNoAuth", err)
	}
	if l, err := bB.Get(ctx, leasehold.LockKey("b", "orders")); err != nil || l.Token != uint64(lB.Token()) {
		t.Fatalf("b's lease after a's attempts: %+v, %v", l, err)
	}
}
