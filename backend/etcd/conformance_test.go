package etcd_test

import (
	"context"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

var prefixes atomic.Int64

// open returns a backend on endpoints with a fresh key prefix (or the given
// one), closed at the end of the test.
func open(t testing.TB, endpoints []string, prefix ...string) *etcd.Backend {
	t.Helper()
	p := fmt.Sprintf("t%d/", prefixes.Add(1))
	if len(prefix) > 0 {
		p = prefix[0]
	}
	b, err := etcd.OpenConfig(context.Background(), etcd.Config{Endpoints: endpoints, Prefix: p})
	if err != nil {
		t.Fatalf("etcd.OpenConfig: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// faultTTL is the holder's TTL in the process-fault and proxy tests.
const faultTTL = 2 * time.Second

// locker returns a Locker with the fault TTL and a 5..100 ms backoff.
func locker(t testing.TB, b backend.Leases, name string) *leasehold.Locker {
	t.Helper()
	return faultkit.Kit{TTL: faultTTL}.Locker(t, b, name)
}

// faultKit describes the backend to the process-fault scenarios: a fresh
// key prefix on the server at addr, reached as user (nil: no auth), fenced
// writes to the key "<prefix>sink". The namespace is an etcd URL without
// its host (see openAt).
func faultKit(addr string, user *url.Userinfo, prefix string) faultkit.Kit {
	ns := &url.URL{Scheme: "etcd", User: user, Path: "/" + prefix}
	return faultkit.Kit{Open: openAt, Addr: addr, NS: ns.String(), TTL: faultTTL, Fenced: fencedPut}
}

// openAt opens the backend the etcd URL ns names (user, prefix) on the
// endpoint addr, closed at the end of the test.
func openAt(t testing.TB, addr, ns string) backend.Leases {
	t.Helper()
	u, err := url.Parse(ns)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	b, err := etcd.Open(context.Background(), u.String())
	if err != nil {
		t.Fatalf("etcd.Open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// fencedPut writes value to "<prefix>sink" fenced by key's token.
func fencedPut(ctx context.Context, b backend.Leases, key string, token uint64, value string) error {
	eb := b.(*etcd.Backend)
	return eb.FencedPut(ctx, key, token, eb.Prefix()+"sink", value)
}

// TestFaultHelper is the helper process of the fault kit.
func TestFaultHelper(t *testing.T) {
	faultkit.Helper(t, faultkit.Kit{Open: openAt, Fenced: fencedPut})
}

func want() backend.Capabilities {
	return backend.Capabilities{
		Name: "etcd", ServerClock: true, SafeFencing: true, DurableFencing: true,
		PushEvents: true, MultiProcess: true, MinTTL: etcd.MinTTL, TTLGranularity: etcd.TTLGranularity,
	}
}

// TestConformance runs the suite on a single-member server; Reopen restarts
// the etcd process on the same data directory.
func TestConformance(t *testing.T) {
	srv := testserver.Etcd(t)
	conformance.Run(t, conformance.Harness{
		New:  func(t testing.TB) backend.Leases { return open(t, []string{srv.Addr()}) },
		Want: want(),
		Wire: &conformance.Wire{
			Framer: chaos.HTTP2,
			Open: func(t testing.TB, wrap func(string) string) (backend.Leases, backend.Leases) {
				p := fmt.Sprintf("t%d/", prefixes.Add(1))
				return open(t, []string{wrap(srv.Addr())}, p), open(t, []string{wrap(srv.Addr())}, p)
			},
		},
		Reopen: func(t testing.TB, b backend.Leases) backend.Leases {
			p := b.(*etcd.Backend).Prefix()
			b.Close()
			srv.Restart()
			return open(t, []string{srv.Addr()}, p)
		},
		Process: func(t testing.TB) faultkit.Kit {
			return faultKit(srv.Addr(), nil, fmt.Sprintf("t%d/", prefixes.Add(1)))
		},
	})
}
