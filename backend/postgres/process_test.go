package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
)

// Process and network fault tests (backend/conformance/faultkit): holders
// in helper processes (this test binary re-executed) killed with SIGKILL or
// claiming one occurrence together, and holders whose connections run
// through a chaos proxy that delays or cuts them. Fenced writes go through
// Fence into a sink table in the test's schema.

const faultTTL = 1500 * time.Millisecond

// faultKit describes the backend to the fault kit: a fresh schema on the
// shared server. The namespace is "<schema> <url>"; Open dials the url
// with its host replaced by addr (the server's or a proxy's).
func faultKit(t testing.TB) faultkit.Kit {
	t.Helper()
	u, schema := freshSchema(t)
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return faultkit.Kit{Open: openAt, Addr: pu.Host, NS: schema + " " + u, TTL: faultTTL, Fenced: fencedWrite, Sink: sink}
}

// faultKitHelper is the kit as the helper process needs it (it reads the
// address and namespace from its environment).
var faultKitHelper = faultkit.Kit{Open: openAt, TTL: faultTTL, Fenced: fencedWrite, Sink: sink}

// openAt opens the schema and url in ns at addr, with the sink table.
func openAt(t testing.TB, addr, ns string) backend.Backend {
	t.Helper()
	schema, u, _ := strings.Cut(ns, " ")
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	pu.Host = addr
	ctx := context.Background()
	b, err := Open(ctx, pu.String(), WithSchema(schema))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	if _, err := b.Pool().Exec(ctx, `CREATE TABLE IF NOT EXISTS `+schema+`.sink (id bigserial PRIMARY KEY, token bigint, v text)`); err != nil {
		t.Fatal(err)
	}
	return b
}

// fencedWrite inserts v into the sink in a transaction fenced by Fence.
// A lease-lost error must be ErrFenced.
func fencedWrite(ctx context.Context, b backend.Backend, key string, token uint64, v string) error {
	pb := b.(*Backend)
	err := pgx.BeginFunc(ctx, pb.Pool(), func(tx pgx.Tx) error {
		if err := pb.Fence(ctx, tx, key, token); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+pb.Schema()+`.sink (token, v) VALUES ($1, $2)`, int64(token), v)
		return err
	})
	if errors.Is(err, backend.ErrLeaseLost) && !errors.Is(err, ErrFenced) {
		return fmt.Errorf("lease lost but not ErrFenced: %v", err) // not %w: the kit must not count it
	}
	return err
}

func sink(ctx context.Context, b backend.Backend) ([]string, error) {
	pb := b.(*Backend)
	rows, err := pb.Pool().Query(ctx, `SELECT v FROM `+pb.Schema()+`.sink ORDER BY id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// TestFaultHelper is the helper process of the fault kit.
func TestFaultHelper(t *testing.T) { faultkit.Helper(t, faultKitHelper) }

// TestKill9Holder: the lease of a holder killed with SIGKILL expires by the
// server's clock; the next holder's token is greater.
func TestKill9Holder(t *testing.T) { faultkit.KillHolder(t, faultKit(t)) }

// TestClaimAcrossProcesses: 32 claimers (4 processes × 8 goroutines) of one
// occurrence; exactly one wins, the others are told it is claimed.
func TestClaimAcrossProcesses(t *testing.T) { faultkit.ClaimAcrossProcesses(t, faultKit(t), 4, 8) }

// TestChaosDelayedRenewReplies: replies to the holder delayed by 0.6×TTL;
// its context ends while the server still holds the lease.
func TestChaosDelayedRenewReplies(t *testing.T) { faultkit.DelayedRenewReplies(t, faultKit(t)) }

// TestChaosConnectionCut: the holder's connections closed or black-holed;
// its context ends by its deadline and its fenced writes are rejected.
func TestChaosConnectionCut(t *testing.T) { faultkit.ConnectionCut(t, faultKit(t)) }
