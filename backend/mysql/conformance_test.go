package mysql

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// freshDB creates a database on the shared server, dropped in t.Cleanup,
// and returns a URL naming it.
func freshDB(t testing.TB) string {
	t.Helper()
	u := testserver.MySQLURL(t)
	name := "lh_test_" + backend.NewNonce().String()[:16]
	testserver.MySQLExec(t, u, "CREATE DATABASE "+name)
	t.Cleanup(func() { testserver.MySQLExec(t, u, "DROP DATABASE IF EXISTS "+name) })
	i := strings.LastIndex(u, "/")
	return u[:i+1] + name
}

func openTest(t testing.TB) (*Backend, string) {
	t.Helper()
	u := freshDB(t)
	b, err := Open(context.Background(), u)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return b, u
}

// openThrough opens two backends on one fresh database, their connections
// going to the server at the address wrap returns for it.
func openThrough(t testing.TB, wrap func(string) string) (backend.Leases, backend.Leases) {
	t.Helper()
	u, err := url.Parse(freshDB(t))
	if err != nil {
		t.Fatalf("server URL: %v", err)
	}
	u.Host = wrap(u.Host)
	var bs [2]backend.Leases
	for i := range bs {
		b, err := Open(context.Background(), u.String())
		if err != nil {
			t.Fatalf("Open through the proxy: %v", err)
		}
		bs[i] = b
	}
	return bs[0], bs[1]
}

// faultTTL is the holder's TTL in the process-fault scenarios.
const faultTTL = 1500 * time.Millisecond

// faultKit describes the backend to the process-fault scenarios: a fresh
// database on the shared server. The namespace is its url; openAt dials
// it with the host replaced by addr (the server's or a proxy's). MySQL has
// no fenced write helper, so the kit's fenced checks do not apply.
func faultKit(t testing.TB) faultkit.Kit {
	t.Helper()
	u := freshDB(t)
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return faultkit.Kit{
		Open: openAt, Addr: pu.Host, NS: u, TTL: faultTTL,
		// The holder's last renewal granted a TTL before the kill; the
		// waiter retries within its 100 ms backoff (+400 ms slack).
		ExpiryBound: faultTTL + 100*time.Millisecond + 400*time.Millisecond,
	}
}

// openAt opens the database named by the url ns at addr.
func openAt(t testing.TB, addr, ns string) backend.Leases {
	t.Helper()
	pu, err := url.Parse(ns)
	if err != nil {
		t.Fatal(err)
	}
	pu.Host = addr
	b, err := Open(context.Background(), pu.String())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestFaultHelper is the helper process of the fault kit.
func TestFaultHelper(t *testing.T) { faultkit.Helper(t, faultkit.Kit{Open: openAt}) }

func TestConformance(t *testing.T) {
	urls := map[*Backend]string{}
	conformance.Run(t, conformance.Harness{
		New: func(t testing.TB) backend.Leases {
			b, u := openTest(t)
			urls[b] = u
			return b
		},
		Want: backend.Capabilities{
			Name: "mysql", ServerClock: true, SafeFencing: true, DurableFencing: true,
			PushEvents: false, MultiProcess: true, MinTTL: time.Millisecond,
		},
		Wire: &conformance.Wire{Framer: chaos.MySQL, Open: openThrough},
		Reopen: func(t testing.TB, old backend.Leases) backend.Leases {
			mb := old.(*Backend)
			mb.Close()
			b, err := Open(context.Background(), urls[mb])
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			return b
		},
		Process: faultKit,
	})
}
