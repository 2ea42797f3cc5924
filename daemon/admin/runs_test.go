package admin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/schedule"
)

// TestRunsPaging: three jobs with occurrences at the same instants (ties
// across jobs) page through completely, in order, without duplicates, with
// filters applied; another job in the ledger that this daemon does not
// run is never listed.
func TestRunsPaging(t *testing.T) {
	b := memory.New()
	ctx := context.Background()
	sched, err := schedule.New(b, schedule.WithInstance("x"))
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []string{"x", "y", "z"} {
		if err := sched.Register(schedule.Job{Name: j, Schedule: "@daily", Func: func(context.Context, schedule.Run) error { return nil }}); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	want := 0
	for i := range 7 {
		for _, j := range []string{"x", "y", "z", "foreign"} {
			at := base.Add(time.Duration(i) * time.Second)
			owner := backend.Owner{Instance: "w", Nonce: backend.NewNonce()}
			g, err := b.Claim(ctx, backend.ClaimRequest{Job: j, ScheduledAt: at, Owner: owner, TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			state := backend.Succeeded
			if i%3 == 0 {
				state = backend.Failed
			}
			if err := b.Finish(ctx, backend.FinishRequest{Job: j, ScheduledAt: at, Owner: owner, Token: g.Token, Outcome: backend.Outcome{State: state}}); err != nil {
				t.Fatal(err)
			}
			if j != "foreign" {
				want++
			}
		}
	}
	srv, err := admin.New(b, sched)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	n := &node{t: t, url: hs.URL, client: hs.Client()}

	page := func(q url.Values) []admin.Run {
		var all []admin.Run
		for {
			var p admin.RunPage
			n.mustGet("/api/v1/runs?"+q.Encode(), &p)
			all = append(all, p.Runs...)
			if p.NextCursor == "" {
				return all
			}
			if len(p.Runs) != 4 {
				t.Fatalf("a page that is not the last has %d runs", len(p.Runs))
			}
			q.Set("cursor", p.NextCursor)
		}
	}
	all := page(url.Values{"limit": {"4"}})
	if len(all) != want {
		t.Fatalf("paged %d runs, want %d", len(all), want)
	}
	seen := map[string]bool{}
	for i, r := range all {
		k := r.Job + "@" + r.ScheduledAt
		if seen[k] || r.Job == "foreign" {
			t.Fatalf("run %s listed twice or foreign", k)
		}
		seen[k] = true
		if i > 0 {
			p := all[i-1]
			if p.ScheduledAt < r.ScheduledAt || (p.ScheduledAt == r.ScheduledAt && p.Job > r.Job) {
				t.Fatalf("runs out of order: %s@%s before %s@%s", p.Job, p.ScheduledAt, r.Job, r.ScheduledAt)
			}
		}
	}
	failed := page(url.Values{"limit": {"4"}, "state": {"failed"}, "job": {"y"}})
	if len(failed) != 3 {
		t.Fatalf("failed runs of y: %d, want 3", len(failed))
	}
	since := base.Add(5 * time.Second).UTC().Format(time.RFC3339)
	recent := page(url.Values{"limit": {"4"}, "since": {since}})
	if len(recent) != 6 {
		t.Fatalf("runs since %s: %d, want 6", since, len(recent))
	}
	if code, _ := n.call("GET", "/api/v1/runs?job=foreign", nil); code != http.StatusNotFound {
		t.Fatalf("runs of a job this daemon does not run = %d, want 404", code)
	}
}
