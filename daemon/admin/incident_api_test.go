package admin_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// TestRunDetailForAnIncident (issue 28 item 12): after a job failed every
// attempt, a run's detail on a real daemon (SQLite) has each attempt with
// its instance, token and error — the retried failures too, which the
// run's record alone overwrote — the whole stored output with its head and
// tail, and how late it was claimed.
func TestRunDetailForAnIncident(t *testing.T) {
	in := startIncident(t)
	n := in.nodes[1] // any daemon of the namespace answers the same
	var d admin.RunDetail
	n.mustGet("/api/v1/runs/flaky/"+url.PathEscape(in.failed.ScheduledAt), &d)
	if d.State != "failed" || d.Attempt != 3 || len(d.Attempts) != 3 {
		t.Fatalf("detail: state %s attempt %d, %d attempts; want failed, 3, 3: %+v", d.State, d.Attempt, len(d.Attempts), d.Attempts)
	}
	var last uint64
	for i, a := range d.Attempts {
		if a.Attempt != i+1 || a.State != "failed" || a.Instance == "" || a.Token == 0 {
			t.Errorf("attempt %d: %+v", i+1, a)
		}
		if uint64(a.Token) <= last {
			t.Errorf("attempt %d token %d not above the previous %d", a.Attempt, a.Token, last)
		}
		last = uint64(a.Token)
		// Each attempt's output names it: the record is that attempt's.
		if !hasAll(a.Result, "attempt "+string(rune('0'+a.Attempt))+" on "+a.Instance+": disk full") || !strings.Contains(a.Error, "exit status 3") {
			t.Errorf("attempt %d: error %q, output tail %q", a.Attempt, a.Error, a.Result[max(0, len(a.Result)-80):])
		}
	}
	if d.Attempts[2].Token != d.Token || d.Attempts[2].Instance != d.Instance {
		t.Errorf("the last attempt %+v is not the run (token %d, instance %s)", d.Attempts[2], d.Token, d.Instance)
	}
	// 5000 lines are more than the ledger keeps: the head and the tail.
	if !strings.HasPrefix(d.Result, "1\n2\n3\n") || !strings.Contains(d.Result, "bytes cut") || !strings.Contains(d.Result, "disk full") || d.OutputTruncated {
		t.Errorf("output: head %q, tail %q, truncated %v", d.Result[:min(20, len(d.Result))], d.Result[max(0, len(d.Result)-60):], d.OutputTruncated)
	}
	if d.ClaimedAt == "" || d.FinishedAt == "" {
		t.Errorf("timings missing: claimed %q finished %q", d.ClaimedAt, d.FinishedAt)
	}
	// The late run: attempt 1, claimed seconds after its instant.
	n.mustGet("/api/v1/runs/ok/"+url.PathEscape(in.lateAt.UTC().Format(time.RFC3339Nano)), &d)
	if d.LateMS == nil || *d.LateMS < 1000 || d.Instance != "web-9" || len(d.Attempts) != 1 {
		t.Errorf("late run: late_ms %v, instance %s, attempts %+v", d.LateMS, d.Instance, d.Attempts)
	}
}

// TestRunFiltersAndPaging: the runs list filters by job, state, instance
// and time range in the API, pages with a cursor under every filter, and
// answers a bad parameter with a 400 that names it and its value.
func TestRunFiltersAndPaging(t *testing.T) {
	in := startIncident(t)
	n := in.nodes[0]
	before := time.Now().UTC().Format(time.RFC3339Nano)
	for _, inst := range []string{"web-1", "web-2", "web-9"} {
		q := url.Values{"instance": {inst}, "limit": {"3"}, "before": {before}}
		seen := map[string]bool{}
		pages := 0
		for {
			var p admin.RunPage
			n.mustGet("/api/v1/runs?"+q.Encode(), &p)
			for _, r := range p.Runs {
				if r.Instance != inst {
					t.Fatalf("instance=%s listed a run of %s", inst, r.Instance)
				}
				k := r.Job + "@" + r.ScheduledAt
				if seen[k] {
					t.Fatalf("instance=%s: %s on two pages", inst, k)
				}
				seen[k] = true
			}
			pages++
			if p.NextCursor == "" {
				break
			}
			q.Set("cursor", p.NextCursor)
		}
		// One page read afterwards has every run the pages had (the jobs
		// run on, so a run scheduled before "before" may be claimed late
		// and appear only in it).
		var all admin.RunPage
		n.mustGet("/api/v1/runs?limit=1000&instance="+inst+"&before="+url.QueryEscape(before), &all)
		inAll := map[string]bool{}
		for _, r := range all.Runs {
			inAll[r.Job+"@"+r.ScheduledAt] = true
		}
		for k := range seen {
			if !inAll[k] {
				t.Errorf("instance=%s: %s paged but not in one page of %d", inst, k, len(all.Runs))
			}
		}
		if len(seen) == 0 || len(all.Runs) > len(seen)+3 {
			t.Errorf("instance=%s: %d runs over %d pages, %d in one", inst, len(seen), pages, len(all.Runs))
		}
	}
	// job + state + time range together.
	at, _ := time.Parse(time.RFC3339Nano, in.failed.ScheduledAt)
	q := url.Values{"job": {"flaky"}, "state": {"failed"}, "since": {in.failed.ScheduledAt}, "before": {at.Add(time.Millisecond).Format(time.RFC3339Nano)}}
	var p admin.RunPage
	n.mustGet("/api/v1/runs?"+q.Encode(), &p)
	if len(p.Runs) != 1 || p.Runs[0].ScheduledAt != in.failed.ScheduledAt {
		t.Errorf("job+state+range: %+v", p.Runs)
	}
	for _, c := range []struct{ query, field, value string }{
		{"state=lost", "state", "lost"},
		{"limit=0", "limit", "0"},
		{"since=yesterday", "since", "yesterday"},
		{"since=2026-01-02T00:00:00Z&before=2026-01-01T00:00:00Z", "since", "2026-01-02T00:00:00Z"},
		{"instance=a%01b", "instance", `a\x01b`},
		{"cursor=nope", "cursor", "nope"},
		{"owner=web-1", "owner", "owner"},
	} {
		code, m := n.call("GET", "/api/v1/runs?"+c.query, nil)
		msg, _ := m["error"].(string)
		if code != 400 || m["field"] != c.field || !strings.Contains(msg, c.value) {
			t.Errorf("?%s = %d %v; want 400 naming %s and %q", c.query, code, m, c.field, c.value)
		}
	}
}

// TestJobInstantsMarksLateAndMissed: a job's time axis has its runs, the
// one claimed seconds after its instant marked late, and the instants of
// its schedule that nothing ran while it was paused marked missed — once
// they are judged (a margin after they were due).
func TestJobInstantsMarksLateAndMissed(t *testing.T) {
	in := startIncident(t)
	n := in.nodes[1]
	var a admin.JobInstants
	eventually.True(t, 40*time.Second, "the paused instants judged missed", func() bool {
		a = n.axis("ok", 2*time.Minute)
		return marks(a)["missed"] >= 2
	})
	m := marks(a)
	if m["late"] < 1 || m["succeeded"] < 3 || a.JudgedFrom == "" || a.Schedule != "@every 1s" {
		t.Errorf("axis of ok: %v, judged from %q, schedule %q", m, a.JudgedFrom, a.Schedule)
	}
	lateAt := in.lateAt.UTC().Format(admin.TimeFormat)
	for i, x := range a.Instants {
		if i > 0 && x.At <= a.Instants[i-1].At {
			t.Fatalf("instants not in order: %s after %s", x.At, a.Instants[i-1].At)
		}
		// A loaded machine may claim others late too: only the run at
		// lateAt must be.
		if x.At == lateAt && (!x.Late || x.Instance != "web-9" || x.LateMS < 1000 || x.State != "succeeded") {
			t.Errorf("instant %+v: not the late run of web-9", x)
		}
		if x.Late && x.LateMS <= admin.LateAfter.Milliseconds() {
			t.Errorf("instant %+v: late by less than %v", x, admin.LateAfter)
		}
		if x.State == admin.InstantMissed && (x.At < a.JudgedFrom || x.At >= a.JudgedUntil) {
			t.Errorf("missed %s outside the judged %s..%s", x.At, a.JudgedFrom, a.JudgedUntil)
		}
	}
	// flaky ran every instant (no missed), report too.
	for _, job := range []string{"flaky", "report"} {
		if got := marks(n.axis(job, 2*time.Minute)); got["missed"] != 0 {
			t.Errorf("axis of %s: %v, want no missed instant", job, got)
		}
	}
	for _, c := range []struct{ query, field string }{
		{"since=x", "since"},
		{"since=2026-01-02T00:00:00Z&before=2026-01-01T00:00:00Z", "since"},
		{"job=ok", "job"},
	} {
		code, m := n.call("GET", "/api/v1/jobs/ok/instants?"+c.query, nil)
		if code != 400 || m["field"] != c.field {
			t.Errorf("instants?%s = %d %v; want 400 naming %s", c.query, code, m, c.field)
		}
	}
	if code, _ := n.call("GET", "/api/v1/jobs/nope/instants", nil); code != 404 {
		t.Errorf("instants of an unknown job = %d, want 404", code)
	}
}
