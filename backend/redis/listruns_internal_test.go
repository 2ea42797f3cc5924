package redis

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// TestListRunsScansInBoundedScripts: Redis keeps no index of running
// records, so a listing without a job (the sweeper's, every few seconds)
// reads the whole ledger. One script over all of it blocks the server for
// as long (≈ 11 µs a record: 1 M kept runs would be 11 s, past the 5 s
// script limit, and lease renewals fail BUSY meanwhile). It must be read
// in scripts of a bounded number of records each, and still find every
// match exactly once, newest first — also when more records than the
// bound share one instant (a script never stops inside one).
func TestListRunsScansInBoundedScripts(t *testing.T) {
	b, c := newCounted(t, 32)
	b.listBudget = 100
	ctx := context.Background()
	base := backend.Instant(time.Now().Add(-time.Hour))
	type rec struct {
		job     string
		at      time.Time
		running bool
	}
	var recs []rec
	for i := range 600 { // 600 finished runs of 6 jobs, 100 instants
		recs = append(recs, rec{fmt.Sprintf("j%d", i%6), base.Add(time.Duration(i/6) * time.Second), false})
	}
	// 250 jobs at one instant, one of them still running.
	crowd := base.Add(50*time.Second + 500*time.Millisecond)
	for i := range 250 {
		recs = append(recs, rec{fmt.Sprintf("crowd%03d", i), crowd, i == 137})
	}
	// Running records at the oldest instants: found only at the end.
	for i := range 3 {
		recs = append(recs, rec{fmt.Sprintf("old%d", i), base.Add(-time.Duration(i+1) * time.Minute), true})
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(recs))
	sem := make(chan struct{}, 64)
	for _, r := range recs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			o := backend.Owner{Instance: "w", Nonce: backend.NewNonce()}
			g, err := b.Claim(ctx, backend.ClaimRequest{Job: r.job, ScheduledAt: r.at, SpecVersion: "v1", Owner: o, TTL: time.Hour})
			if err == nil && !r.running {
				err = b.Finish(ctx, backend.FinishRequest{Job: r.job, ScheduledAt: r.at, Owner: o, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded}})
			}
			if err != nil {
				errs <- fmt.Errorf("%s@%v: %w", r.job, r.at, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	calls := func() int64 { return c.single.Load() + c.pipelined.Load() }
	before := calls()
	got, err := b.ListRuns(ctx, backend.RunFilter{State: backend.Running, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	scripts := calls() - before
	want := []string{"crowd137", "old0", "old1", "old2"}
	if len(got) != len(want) {
		t.Fatalf("ListRuns(running) found %d runs %v, want %v", len(got), jobsOf(got), want)
	}
	for i, r := range got {
		if r.Job != want[i] || r.State != backend.Running {
			t.Fatalf("ListRuns(running) = %v, want %v newest first, all running", jobsOf(got), want)
		}
	}
	// 853 records, at most 100 a script but never stopping inside the
	// 250 of one instant: at least 853/350 scripts; one script for all is
	// what blocked the server.
	if scripts < 3 {
		t.Fatalf("ListRuns read %d records in %d script calls: a script per at most %d records (or one instant) was expected", len(recs), scripts, b.listBudget)
	}
	// A limit met early stops early, and Before pages on from there.
	first, err := b.ListRuns(ctx, backend.RunFilter{State: backend.Running, Limit: 2})
	if err != nil || len(first) != 2 || first[0].Job != "crowd137" || first[1].Job != "old0" {
		t.Fatalf("ListRuns(running, limit 2) = %v, %v; want crowd137, old0", jobsOf(first), err)
	}
	rest, err := b.ListRuns(ctx, backend.RunFilter{State: backend.Running, Before: first[1].ScheduledAt, Limit: 100})
	if err != nil || len(rest) != 2 || rest[0].Job != "old1" || rest[1].Job != "old2" {
		t.Fatalf("ListRuns(running, before old0) = %v, %v; want old1, old2", jobsOf(rest), err)
	}
	all, err := b.ListRuns(ctx, backend.RunFilter{Limit: 10000})
	if err != nil || len(all) != len(recs) {
		t.Fatalf("ListRuns(any state) found %d of %d records: %v", len(all), len(recs), err)
	}
}

func jobsOf(rs []backend.Run) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Job
	}
	return out
}
