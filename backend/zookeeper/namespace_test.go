package zookeeper_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/zookeeper"
	"github.com/leasehold/leasehold/internal/testserver"
	"github.com/leasehold/leasehold/schedule"
)

// TestNamespaceConfinedByDigestACL: tenant roots /tenants/a and /tenants/b,
// each readable and writable only by its digest user, under a /tenants that
// tenants may only read (docs/namespaces.md, ZooKeeper). User a works in
// /tenants/a and is refused everything in /tenants/b.
func TestNamespaceConfinedByDigestACL(t *testing.T) {
	srv := testserver.ZooKeeper(t)
	admin := connectPlain(t, srv.Addr())
	for _, step := range []struct {
		path string
		acl  []zk.ACL
	}{
		{"/tenants", zk.WorldACL(zk.PermAll)},
		{"/tenants/a", zk.DigestACL(zk.PermAll, "app_a", "pw-a")},
		{"/tenants/b", zk.DigestACL(zk.PermAll, "app_b", "pw-b")},
	} {
		if _, err := admin.Create(step.path, nil, 0, step.acl); err != nil {
			t.Fatalf("create %s: %v", step.path, err)
		}
	}
	if _, err := admin.SetACL("/tenants", zk.WorldACL(zk.PermRead), -1); err != nil {
		t.Fatal(err)
	}
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
