package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// freshSchema returns the shared server's URL and a new schema name that
// is dropped (with everything in it) in t.Cleanup.
func freshSchema(t testing.TB) (string, string) {
	t.Helper()
	u := testserver.PostgresURL(t)
	schema := "lh_test_" + backend.NewNonce().String()[:16]
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, fmt.Sprintf(`DROP SCHEMA IF EXISTS %s CASCADE`, schema)); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return u, schema
}

// openTest opens a backend in a fresh schema; the caller (or the suite)
// closes it.
func openTest(t testing.TB, opts ...Option) *Backend {
	t.Helper()
	u, schema := freshSchema(t)
	b, err := Open(context.Background(), u, append([]Option{WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return b
}

// openThrough opens two backends in one fresh schema, their connections
// going to the server at the address wrap returns for it.
func openThrough(t testing.TB, wrap func(string) string) (backend.Leases, backend.Leases) {
	t.Helper()
	raw, schema := freshSchema(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("server URL: %v", err)
	}
	u.Host = wrap(u.Host)
	var bs [2]backend.Leases
	for i := range bs {
		b, err := Open(context.Background(), u.String(), WithSchema(schema))
		if err != nil {
			t.Fatalf("Open through the proxy: %v", err)
		}
		bs[i] = b
	}
	return bs[0], bs[1]
}

// want is what the backend declares against a server with fsync and
// synchronous_commit on (the machine's service and testserver.Postgres).
var want = backend.Capabilities{
	Name:           "postgres",
	ServerClock:    true,
	SafeFencing:    true,
	DurableFencing: true,
	PushEvents:     true,
	MultiProcess:   true,
	MinTTL:         time.Millisecond,
}

// faultTTL is the holder's TTL in the process-fault scenarios.
const faultTTL = 1500 * time.Millisecond

// faultKit describes the backend to the process-fault scenarios: a fresh
// schema on the shared server.
func faultKit(t testing.TB) faultkit.Kit {
	t.Helper()
	u, schema := freshSchema(t)
	return faultKitAt(t, u, schema, "")
}

// faultKitAt describes the backend in schema (tables prefixed by prefix)
// at the server and as the role the url u names. The namespace is u with
// schema and table_prefix; openAt dials it with the host replaced by addr
// (the server's or a proxy's). Fenced writes go through Fence into a sink
// table in the schema.
func faultKitAt(t testing.TB, u, schema, prefix string) faultkit.Kit {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := pu.Query()
	q.Set("schema", schema)
	if prefix != "" {
		q.Set("table_prefix", prefix)
	}
	pu.RawQuery = q.Encode()
	return faultkit.Kit{Open: openAt, Addr: pu.Host, NS: pu.String(), TTL: faultTTL, Fenced: fencedWrite, Sink: sink}
}

// TestFaultHelper is the helper process of the fault kit.
func TestFaultHelper(t *testing.T) {
	faultkit.Helper(t, faultkit.Kit{Open: openAt, Fenced: fencedWrite, Sink: sink})
}

// openAt opens the backend the url ns names at addr, with the sink table.
func openAt(t testing.TB, addr, ns string) backend.Leases {
	t.Helper()
	pu, err := url.Parse(ns)
	if err != nil {
		t.Fatal(err)
	}
	pu.Host = addr
	ctx := context.Background()
	b, err := Open(ctx, pu.String())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	if _, err := b.Pool().Exec(ctx, `CREATE TABLE IF NOT EXISTS `+sinkTable(b)+` (id bigserial PRIMARY KEY, token bigint, v text)`); err != nil {
		t.Fatal(err)
	}
	return b
}

// sinkTable is the schema-qualified table the fenced writes go to.
func sinkTable(b *Backend) string { return b.Schema() + "." + b.prefix + "sink" }

// fencedWrite inserts v into the sink in a transaction fenced by Fence.
// A lease-lost error must be ErrLeaseFenced.
func fencedWrite(ctx context.Context, b backend.Leases, key string, token uint64, v string) error {
	pb := b.(*Backend)
	err := pgx.BeginFunc(ctx, pb.Pool(), func(tx pgx.Tx) error {
		if err := pb.Fence(ctx, tx, key, token); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+sinkTable(pb)+` (token, v) VALUES ($1, $2)`, int64(token), v)
		return err
	})
	if errors.Is(err, backend.ErrLeaseLost) && !errors.Is(err, ErrLeaseFenced) {
		return fmt.Errorf("lease lost but not ErrLeaseFenced: %v", err) // not %w: the kit must not count it
	}
	return err
}

// sink returns the values written to the sink, in order.
func sink(ctx context.Context, b backend.Leases) ([]string, error) {
	pb := b.(*Backend)
	rows, err := pb.Pool().Query(ctx, `SELECT v FROM `+sinkTable(pb)+` ORDER BY id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// TestConformance runs the shared suite, each New in its own schema.
// Reopen closes the pool and opens a new one on the same schema, as a
// restarted process would; TestRestartKeepsTokens restarts the server.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		New:      func(t testing.TB) backend.Leases { return openTest(t) },
		Want:     want,
		Wire:     &conformance.Wire{Framer: chaos.Postgres, Open: openThrough},
		Parallel: true, // each New is a schema of its own; Reopen opens a new pool on it
		Reopen: func(t testing.TB, old backend.Leases) backend.Leases {
			pb := old.(*Backend)
			u := testserver.PostgresURL(t)
			if err := pb.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			b, err := Open(context.Background(), u, WithSchema(pb.Schema()))
			if err != nil {
				t.Fatalf("reopen schema %s: %v", pb.Schema(), err)
			}
			return b
		},
		Process: faultKit,
	})
}
