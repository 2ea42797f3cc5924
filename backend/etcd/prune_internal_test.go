package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestConcurrentPrunesKeepARunningRun: Prune lists the finished-run index,
// then deletes each entry's run. Two Prunes and a claim between them:
//
//	A claims X and finishes it (index entry e)
//	P2 lists the index: [e]
//	P1 prunes X and e; B claims X again: running
//	P2 goes on to e's run
//
// P2 must not delete B's running record (it did, by an unguarded delete,
// and then C's claim of X won it too, beside B). P2's two steps are called
// apart here, as its listing and its Txn.
func TestConcurrentPrunesKeepARunningRun(t *testing.T) {
	srv := testserver.Etcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := OpenConfig(ctx, Config{Endpoints: []string{srv.Addr()}, Prefix: "pr/"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	at := time.Now().Truncate(time.Second)
	claim := func(instance string) (backend.Grant, backend.Owner, error) {
		o := backend.Owner{Instance: instance, Nonce: backend.NewNonce()}
		g, err := b.Claim(ctx, backend.ClaimRequest{Job: "j", ScheduledAt: at, Owner: o, TTL: 30 * time.Second, MaxEarly: time.Minute})
		return g, o, err
	}
	ga, a, err := claim("A")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Finish(ctx, backend.FinishRequest{Job: "j", ScheduledAt: at, Owner: a, Token: ga.Token, Outcome: backend.Outcome{State: backend.Succeeded}}); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	stale, read, err := b.finishedBefore(ctx, later, 100) // P2's listing
	if err != nil || len(stale) != 1 {
		t.Fatalf("P2's listing: %v, %v; want one entry", stale, err)
	}
	if n, err := b.Prune(ctx, later, 100); err != nil || n != 1 { // P1
		t.Fatalf("P1: pruned %d, %v; want 1", n, err)
	}
	gb, _, err := claim("B")
	if err != nil {
		t.Fatalf("B's claim of the pruned occurrence: %v", err)
	}
	if n, _, err := b.pruneEntries(ctx, stale, read); err != nil || n != 0 { // P2 goes on
		t.Fatalf("P2's deletes from its stale listing: pruned %d, %v; want 0", n, err)
	}
	r, err := b.GetRun(ctx, "j", at)
	if err != nil || r.State != backend.Running || r.Token != gb.Token {
		t.Fatalf("after P2, B's running run (token %d) reads %+v, %v — Prune deleted a running run", gb.Token, r, err)
	}
	var claimed *backend.ClaimedError
	if _, _, err := claim("C"); !errors.As(err, &claimed) || claimed.Run.Token != gb.Token {
		t.Fatalf("C's claim while B runs: %v, want a *ClaimedError naming B's token %d", err, gb.Token)
	}
}
