package mysql

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/internal/testserver"
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
		Reopen: func(t testing.TB, old backend.Leases) backend.Leases {
			mb := old.(*Backend)
			mb.Close()
			b, err := Open(context.Background(), urls[mb])
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			return b
		},
	})
}
