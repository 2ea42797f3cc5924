package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// Races between two reads of one answer, and between two Prunes, put in
// order through the package's hooks (hooks.go). Found by a hostile review
// of the one-snapshot read of an occurrence (readOcc).

// TestConcurrentPrunesKeepARunningRun: Prune lists the finished-run index,
// then deletes each entry's run. Two Prunes and a claim between them:
//
//	A claims X and finishes it (index entry e)
//	P2 lists the index: [e]                  (held here)
//	P1 prunes X and e; B claims X again: running
//	P2 goes on to e's run
//
// P2 must not delete B's running record (it did, by an unguarded delete,
// and then C's claim of X won it too, beside B).
func TestConcurrentPrunesKeepARunningRun(t *testing.T) {
	srv := testserver.ZooKeeper(t)
	prefix := fmt.Sprintf("/pr%d", time.Now().UnixNano())
	g := newGate()
	hooked := openHooked(t, srv.Addr(), prefix, 10*time.Second, hooks{pruneEntry: func(name string) { g.pass(name) }})
	plain := openHooked(t, srv.Addr(), prefix, 10*time.Second, hooks{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	at := time.Now().Truncate(time.Second)
	claim := func(o backend.Owner) (backend.Grant, error) {
		return plain.Claim(ctx, backend.ClaimRequest{Job: "j", ScheduledAt: at, Owner: o, TTL: 30 * time.Second, MaxEarly: time.Minute})
	}
	a := owner("A")
	ga, err := claim(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Finish(ctx, backend.FinishRequest{Job: "j", ScheduledAt: at, Owner: a, Token: ga.Token, Outcome: backend.Outcome{State: backend.Succeeded}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := hooked.Prune(ctx, time.Now().Add(time.Hour), 100); done <- err }()
	g.wait(t, 30*time.Second, "P2's delete")
	if n, err := plain.Prune(ctx, time.Now().Add(time.Hour), 100); err != nil || n != 1 {
		t.Fatalf("P1: pruned %d, %v; want 1", n, err)
	}
	gb, err := claim(owner("B"))
	if err != nil {
		t.Fatalf("B's claim of the pruned occurrence: %v", err)
	}
	g.open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r, err := plain.GetRun(ctx, "j", at)
	if err != nil || r.State != backend.Running || r.Token != gb.Token {
		t.Fatalf("after the second Prune, B's running run (token %d) reads %+v, %v — Prune deleted a running run", gb.Token, r, err)
	}
	var claimed *backend.ClaimedError
	if _, err := claim(owner("C")); !errors.As(err, &claimed) || claimed.Run.Token != gb.Token {
		t.Fatalf("C's claim while B runs: %v, want a *ClaimedError naming B's token %d", err, gb.Token)
	}
}

// TestClaimOverlapAcrossPrune: Claim's overlap answer comes from a count
// read after the occurrence's record. Interleaving (P runs throughout;
// MaxRunning 2 for the checked Claim C of X):
//
//	C reads X: absent
//	D claims X, E claims Y                   (X, Y and P running)
//	C counts the others: P, Y = 2 >= 2
//	E finishes Y; D finishes X; a Prune deletes both
//	C confirms
//
// No moment had X unclaimed while 2 others ran: C may answer OK (after the
// Prune) or *ClaimedError (while X was there), never ErrOverlap.
func TestClaimOverlapAcrossPrune(t *testing.T) {
	srv := testserver.ZooKeeper(t)
	prefix := fmt.Sprintf("/cp%d", time.Now().UnixNano())
	before, after := newGate(), newGate()
	hooked := openHooked(t, srv.Addr(), prefix, 10*time.Second, hooks{claimCount: func(stage string) {
		if stage == "before" {
			before.pass(stage)
		} else {
			after.pass(stage)
		}
	}})
	plain := openHooked(t, srv.Addr(), prefix, 10*time.Second, hooks{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	at := time.Now().Truncate(time.Second)
	other, pre := at.Add(-time.Minute), at.Add(-2*time.Minute)
	claim := func(when time.Time, o backend.Owner) backend.Grant {
		t.Helper()
		g, err := plain.Claim(ctx, backend.ClaimRequest{Job: "j", ScheduledAt: when, Owner: o, TTL: 10 * time.Second, MaxEarly: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	claim(pre, owner("P")) // runs throughout: the first of the "others"

	done := make(chan error, 1)
	go func() {
		_, err := hooked.Claim(ctx, backend.ClaimRequest{Job: "j", ScheduledAt: at, Owner: owner("C"), TTL: 10 * time.Second, MaxEarly: time.Minute, MaxRunning: 2})
		done <- err
	}()
	before.wait(t, 30*time.Second, "C's count")
	d, e := owner("D"), owner("E")
	gx, gy := claim(at, d), claim(other, e)
	before.open()
	after.wait(t, 30*time.Second, "C's confirmation")
	fin := backend.Outcome{State: backend.Succeeded}
	if err := plain.Finish(ctx, backend.FinishRequest{Job: "j", ScheduledAt: other, Owner: e, Token: gy.Token, Outcome: fin}); err != nil {
		t.Fatal(err)
	}
	if err := plain.Finish(ctx, backend.FinishRequest{Job: "j", ScheduledAt: at, Owner: d, Token: gx.Token, Outcome: fin}); err != nil {
		t.Fatal(err)
	}
	if n, err := plain.Prune(ctx, time.Now().Add(time.Hour), 100); err != nil || n != 2 {
		t.Fatalf("Prune: %d, %v; want 2", n, err)
	}
	after.open()
	err := <-done
	var claimed *backend.ClaimedError
	if err != nil && !errors.As(err, &claimed) {
		t.Fatalf("Claim answered %v: no moment had the occurrence unclaimed while 2 others ran", err)
	}
}

// TestListRunsSeesAFreshClaimLive: ListRuns lists a job's live lease nodes,
// then reads its runs; a claim between the two must not show its run as
// running with an expired lease (a state it never had: the sweep would try
// to recover it, and status would say its runner is gone).
func TestListRunsSeesAFreshClaimLive(t *testing.T) {
	srv := testserver.ZooKeeper(t)
	prefix := fmt.Sprintf("/lr%d", time.Now().UnixNano())
	g := newGate()
	hooked := openHooked(t, srv.Addr(), prefix, 10*time.Second, hooks{aliveListed: func(job string) { g.pass(job) }})
	plain := openHooked(t, srv.Addr(), prefix, 10*time.Second, hooks{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	at := time.Now().Truncate(time.Second)
	// The job's first occurrence, finished: the job's nodes exist.
	o := owner("first")
	g0, err := plain.Claim(ctx, backend.ClaimRequest{Job: "j", ScheduledAt: at.Add(-time.Minute), Owner: o, TTL: time.Minute, MaxEarly: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Finish(ctx, backend.FinishRequest{Job: "j", ScheduledAt: at.Add(-time.Minute), Owner: o, Token: g0.Token, Outcome: backend.Outcome{State: backend.Succeeded}}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		runs []backend.Run
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		runs, err := hooked.ListRuns(ctx, backend.RunFilter{Job: "j"})
		done <- answer{runs, err}
	}()
	g.wait(t, 30*time.Second, "ListRuns' listing of the live lease nodes")
	gr, err := plain.Claim(ctx, backend.ClaimRequest{Job: "j", ScheduledAt: at, Owner: owner("fresh"), TTL: time.Minute, MaxEarly: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	g.open()
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	for _, r := range a.runs {
		if r.Token == gr.Token && (r.State != backend.Running || r.Expired) {
			t.Fatalf("the run claimed during ListRuns (token %d, a 1m lease) reads %s, expired %v", gr.Token, r.State, r.Expired)
		}
	}
}
