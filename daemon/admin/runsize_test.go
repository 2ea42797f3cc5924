package admin_test

import (
	"context"
	"io"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/schedule"
)

// TestRunsAnswerBounded (issue 27 item 6): 1,000 runs with 20 KiB of
// control-byte output each made one GET /api/v1/runs?limit=1000 answer
// ~100 MB (each control byte escaped to six in JSON), and ten at once
// drove the daemon to 4 GB. A list answer stays under admin.MaxRunsAnswer
// (output shortened to a preview; the page ends early with a cursor), the
// pages still reach every run, and a run's whole output comes from its
// detail request.
func TestRunsAnswerBounded(t *testing.T) {
	b := memory.New()
	ctx := context.Background()
	sched, err := schedule.New(b, schedule.WithInstance("x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sched.Register(schedule.Job{Name: "x", Schedule: "@daily", Func: func(context.Context, schedule.Run) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	output := strings.Repeat("\x01", 20<<10)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	const total = 1000
	for i := range total {
		at := base.Add(time.Duration(i) * time.Second)
		owner := backend.Owner{Instance: "w", Nonce: backend.NewNonce()}
		g, err := b.Claim(ctx, backend.ClaimRequest{Job: "x", ScheduledAt: at, Owner: owner, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Finish(ctx, backend.FinishRequest{Job: "x", ScheduledAt: at, Owner: owner, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded, Result: output}}); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := admin.New(b, sched)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	n := &node{t: t, url: hs.URL, client: hs.Client()}

	q := url.Values{"limit": {"1000"}}
	seen := 0
	var last admin.Run
	for pages := 0; ; pages++ {
		resp, err := hs.Client().Get(hs.URL + "/api/v1/runs?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if len(body) > admin.MaxRunsAnswer {
			t.Fatalf("GET /api/v1/runs?%s answered %d bytes, more than MaxRunsAnswer %d", q.Encode(), len(body), admin.MaxRunsAnswer)
		}
		var p admin.RunPage
		n.mustGet("/api/v1/runs?"+q.Encode(), &p)
		seen += len(p.Runs)
		if len(p.Runs) > 0 {
			last = p.Runs[len(p.Runs)-1]
		}
		if p.NextCursor == "" {
			break
		}
		if pages > total {
			t.Fatal("paging does not end")
		}
		q.Set("cursor", p.NextCursor)
	}
	if seen != total {
		t.Fatalf("pages reached %d runs, want %d", seen, total)
	}
	if !last.OutputTruncated || len(last.Result) >= len(output) {
		t.Fatalf("a listed run carries %d bytes of its %d-byte output (truncated %v); want a preview", len(last.Result), len(output), last.OutputTruncated)
	}
	at, err := time.Parse(time.RFC3339Nano, last.ScheduledAt)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := b.GetRun(ctx, "x", at)
	if err != nil {
		t.Fatal(err)
	}
	var full admin.Run
	n.mustGet("/api/v1/runs/x/"+url.PathEscape(last.ScheduledAt), &full)
	if full.Result != stored.Result || full.OutputTruncated || len(full.Result) <= len(last.Result) {
		t.Fatalf("the run's detail carries %d bytes of output (truncated %v), want all %d stored", len(full.Result), full.OutputTruncated, len(stored.Result))
	}
}
