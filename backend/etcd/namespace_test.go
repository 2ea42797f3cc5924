package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/internal/testserver"
	"github.com/leasehold/leasehold/schedule"
)

// enableRBAC creates root and, per tenant, the role and user of
// docs/namespaces.md (etcd): readwrite on the key prefix "<tenant>/" only.
// Then it turns authentication on.
func enableRBAC(t *testing.T, endpoint string, tenants ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	steps := []func() error{
		func() error { _, err := c.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
	}
	for _, tn := range tenants {
		steps = append(steps,
			func() error { _, err := c.RoleAdd(ctx, tn); return err },
			func() error {
				_, err := c.RoleGrantPermission(ctx, tn, tn+"/", clientv3.GetPrefixRangeEnd(tn+"/"), clientv3.PermissionType(clientv3.PermReadWrite))
				return err
			},
			func() error { _, err := c.UserAdd(ctx, "app-"+tn, "pw-"+tn); return err },
			func() error { _, err := c.UserGrantRole(ctx, "app-"+tn, tn); return err },
		)
	}
	steps = append(steps, func() error { _, err := c.AuthEnable(ctx); return err })
	for i, s := range steps {
		if err := s(); err != nil {
			t.Fatalf("RBAC setup step %d: %v", i, err)
		}
	}
}

func openAs(t testing.TB, endpoint, tenant, prefix string, noCompact bool) (*etcd.Backend, error) {
	return etcd.OpenConfig(context.Background(), etcd.Config{Endpoints: []string{endpoint}, Prefix: prefix,
		Username: "app-" + tenant, Password: "pw-" + tenant, NoCompact: noCompact})
}

// TestNamespaceConfinedByRBAC: a user whose role covers the key prefix
// "lh-a/" runs the conformance suite there (NoCompact: compaction is
// cluster-wide) and the server refuses it "lh-b/".
func TestNamespaceConfinedByRBAC(t *testing.T) {
	srv := testserver.Etcd(t)
	enableRBAC(t, srv.Addr(), "lh-a", "lh-b")
	ctx := context.Background()

	var n atomic.Int64
	t.Run("conformance in A", func(t *testing.T) {
		conformance.Run(t, conformance.Harness{
			New: func(t testing.TB) backend.Leases {
				b, err := openAs(t, srv.Addr(), "lh-a", fmt.Sprintf("lh-a/t%d/", n.Add(1)), true)
				if err != nil {
					t.Fatalf("open as lh-a: %v", err)
				}
				return b
			},
			Want: want(),
			Reopen: func(t testing.TB, old backend.Leases) backend.Leases {
				p := old.(*etcd.Backend).Prefix()
				old.Close()
				srv.Restart()
				b, err := openAs(t, srv.Addr(), "lh-a", p, true)
				if err != nil {
					t.Fatalf("reopen as lh-a: %v", err)
				}
				return b
			},
		})
	})

	bB, err := openAs(t, srv.Addr(), "lh-b", "lh-b/", true)
	if err != nil {
		t.Fatal(err)
	}
	defer bB.Close()
	lkB, err := leasehold.NewLocker(bB, leasehold.WithNamespace("b"), leasehold.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lB, err := lkB.TryAcquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer lB.Release(ctx)

	bA, err := openAs(t, srv.Addr(), "lh-a", "lh-a/", false)
	if err != nil {
		t.Fatal(err)
	}
	defer bA.Close()
	lkA, err := leasehold.NewLocker(bA, leasehold.WithNamespace("a"), leasehold.WithTTL(5*time.Second))
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
	// Prune with compaction (not NoCompact): etcd 3.4 lets a user without
	// the root role compact the whole cluster's history
	// (docs/namespaces.md). If this fails, a newer etcd refuses it: update
	// the doc.
	if pruned, err := bA.Prune(ctx, time.Now().Add(time.Hour), 100); err != nil || pruned != 1 {
		t.Fatalf("Prune (with compaction) as a confined user: %d deleted, %v; want 1, nil", pruned, err)
	}

	// A in B: refused.
	if _, err := openAs(t, srv.Addr(), "lh-a", "lh-b/", true); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("open of lh-b/ as lh-a: %v, want permission denied", err)
	}
	raw, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Addr()}, Username: "app-lh-a", Password: "pw-lh-a", DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	bKey := bB.LockKey(leasehold.LockKey("b", "orders"))
	for name, op := range map[string]func() error{
		"get":    func() error { _, err := raw.Get(ctx, bKey); return err },
		"put":    func() error { _, err := raw.Put(ctx, bKey, "x"); return err },
		"delete": func() error { _, err := raw.Delete(ctx, "lh-b/", clientv3.WithPrefix()); return err },
		"txn": func() error {
			_, err := raw.Txn(ctx).Then(clientv3.OpDelete(bKey)).Commit()
			return err
		},
	} {
		if err := op(); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("%s on B's key as A: %v, want permission denied", name, err)
		}
	}
	if l, err := bB.Get(ctx, leasehold.LockKey("b", "orders")); err != nil || l.Token != uint64(lB.Token()) {
		t.Fatalf("B's lease after A's attempts: %+v, %v", l, err)
	}
}
