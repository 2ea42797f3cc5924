package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

// TestEndpoints exercises every endpoint of a real daemon's API.
func TestEndpoints(t *testing.T) {
	b := memory.New()
	n := startNode(t, b, "d1", "team-a", fmt.Sprintf(jobsYAML, "a"))

	var inst struct {
		Namespace string           `json:"namespace"`
		Instances []admin.Instance `json:"instances"`
	}
	n.mustGet("/api/v1/instances", &inst)
	if inst.Namespace != "team-a" || len(inst.Instances) != 1 || inst.Instances[0].Instance != "d1" ||
		!inst.Instances[0].Alive || !inst.Instances[0].Self || inst.Instances[0].LeaseRemainingMS <= 0 || inst.Instances[0].Token == 0 {
		t.Fatalf("instances = %+v", inst)
	}

	var jobs struct{ Jobs []admin.Job }
	n.mustGet("/api/v1/jobs?next=2", &jobs)
	if len(jobs.Jobs) != 2 || jobs.Jobs[0].Name != "a-lead" || jobs.Jobs[1].Name != "a-tick" || len(jobs.Jobs[1].Next) != 2 ||
		jobs.Jobs[0].Mode != "leader" || jobs.Jobs[1].Paused {
		t.Fatalf("jobs = %+v", jobs)
	}
	var one admin.Job
	n.mustGet("/api/v1/jobs/a-tick", &one)
	if one.Name != "a-tick" || one.Schedule != "@every 300ms" || one.Zone != "UTC" {
		t.Fatalf("job = %+v", one)
	}

	// The leader job makes d1 the leader of schedule/leader.
	var leaders struct{ Leaders []admin.Leader }
	eventually.True(t, 10*time.Second, "d1 leading", func() bool {
		n.mustGet("/api/v1/leaders", &leaders)
		return len(leaders.Leaders) == 1
	})
	l := leaders.Leaders[0]
	if l.Role != schedule.LeaderRole || l.Instance != "d1" || !l.Self || l.SinceObserved || l.Token == 0 || l.Since == "" {
		t.Fatalf("leader = %+v", l)
	}

	var locks struct{ Locks []admin.Lock }
	n.mustGet("/api/v1/locks", &locks)
	if len(locks.Locks) != 1 || locks.Locks[0].Key != "instances/d1" || locks.Locks[0].Instance != "d1" {
		t.Fatalf("locks = %+v", locks)
	}
	n.mustGet("/api/v1/locks?prefix=nothing/&limit=5", &locks)
	if len(locks.Locks) != 0 {
		t.Fatalf("locks with prefix = %+v", locks)
	}

	var page admin.RunPage
	eventually.True(t, 20*time.Second, "3 succeeded runs of a-tick", func() bool {
		n.mustGet("/api/v1/runs?job=a-tick&state=succeeded", &page)
		return len(page.Runs) >= 3
	})
	for _, r := range page.Runs {
		if r.Job != "a-tick" || r.State != "succeeded" || r.Instance != "d1" || r.Token == 0 || r.Attempt != 1 || r.FinishedAt == "" {
			t.Fatalf("run = %+v", r)
		}
	}

	// Trigger: a run of the job itself, claimed once per key.
	var highest leasehold.Token // of the scheduled runs so far
	for _, r := range page.Runs {
		highest = max(highest, r.Token)
	}
	var trig struct {
		Job, Key, Runs string
		ScheduledAt    string `json:"scheduled_at"`
		Token          leasehold.Token
	}
	if code, m := n.call("POST", "/api/v1/jobs/a-tick/trigger?key=deploy-42", &trig); code != http.StatusAccepted || trig.Token <= highest {
		t.Fatalf("trigger = %d %v %+v, want 202 and a token above the scheduled runs' %d", code, m, trig, highest)
	}
	if code, m := n.call("POST", "/api/v1/jobs/a-tick/trigger?key=deploy-42", nil); code != http.StatusConflict || m["field"] != "key" ||
		!strings.Contains(m["error"].(string), `"deploy-42"`) {
		t.Fatalf("second trigger with the same key = %d %v", code, m)
	}
	eventually.True(t, 10*time.Second, "the triggered run recorded", func() bool {
		n.mustGet(trig.Runs, &page)
		return len(page.Runs) == 1 && page.Runs[0].State == "succeeded"
	})
	if r := page.Runs[0]; r.Job != "a-tick" || r.Trigger != "deploy-42" || r.Token != trig.Token || r.ScheduledAt != trig.ScheduledAt || r.Instance != "d1" {
		t.Fatalf("triggered run = %+v, want a run of a-tick by d1 at %s with token %v, trigger deploy-42", r, trig.ScheduledAt, trig.Token)
	}
	var all admin.Status
	n.mustGet("/api/v1/status?runs=1000", &all)
	listed := false
	for _, r := range all.Runs {
		listed = listed || (r.Trigger == "deploy-42" && r.Job == "a-tick" && r.Token == trig.Token)
	}
	if !listed {
		t.Fatalf("the triggered run is missing from the status's %d runs", len(all.Runs))
	}
	if code, m := n.call("POST", "/api/v1/jobs/a-tick/trigger", &trig); code != http.StatusAccepted || !strings.HasPrefix(trig.Key, "api-") {
		t.Fatalf("trigger without key = %d %v %+v", code, m, trig)
	}

	// Pause and resume, as recorded in the backend.
	var ps struct {
		Job    string
		Paused bool
	}
	if code, m := n.call("POST", "/api/v1/jobs/a-tick/pause", &ps); code != http.StatusOK || !ps.Paused {
		t.Fatalf("pause = %d %v", code, m)
	}
	n.mustGet("/api/v1/jobs/a-tick", &one)
	if !one.Paused {
		t.Fatalf("job after pause = %+v", one)
	}
	if code, m := n.call("POST", "/api/v1/jobs/a-tick/trigger?key=while-paused", nil); code != http.StatusConflict || m["field"] != "job" ||
		!strings.Contains(m["error"].(string), "paused") {
		t.Fatalf("trigger of a paused job = %d %v, want 409 on field job", code, m)
	}
	if code, m := n.call("POST", "/api/v1/jobs/a-tick/resume", &ps); code != http.StatusOK || ps.Paused {
		t.Fatalf("resume = %d %v", code, m)
	}
	n.mustGet("/api/v1/jobs/a-tick", &one)
	if one.Paused {
		t.Fatalf("job after resume = %+v", one)
	}
	if code, m := n.call("POST", "/api/v1/jobs/a-tick/trigger?key=while-paused", nil); code != http.StatusAccepted {
		t.Fatalf("trigger with the key refused while paused, after the resume = %d %v", code, m)
	}

	// Status has everything.
	var st admin.Status
	n.mustGet("/api/v1/status?runs=5", &st)
	if st.Namespace != "team-a" || st.Instance != "d1" || len(st.Instances) != 1 || len(st.Leaders) != 1 || len(st.Jobs) != 2 || len(st.Runs) < 3 || len(st.Runs) > 5 {
		t.Fatalf("status = %+v", st)
	}

	// Resign: d1 leads, so it steps down; a second resign finds it not leading.
	if code, m := n.call("POST", "/api/v1/leaders/"+url.PathEscape(schedule.LeaderRole)+"/resign", nil); code != http.StatusOK {
		t.Fatalf("resign = %d %v", code, m)
	}
	if code, m := n.call("POST", "/api/v1/leaders/schedule%2Fleader/resign", nil); code != http.StatusConflict || m["field"] != "role" {
		t.Fatalf("resign when not leading = %d %v", code, m)
	}

	// The page, its assets and the OpenAPI document.
	for path, ctype := range map[string]string{"/": "text/html", "/dashboard/app.js": "text/javascript", "/dashboard/style.css": "text/css", "/openapi.yaml": "application/yaml"} {
		resp, err := http.Get(n.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) {
			t.Fatalf("GET %s = %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
}

// TestBadRequests: every bad parameter gets a JSON error naming the field
// (and the value), and changes nothing.
func TestBadRequests(t *testing.T) {
	// open_reads: the Host check (DNS rebinding) guards what answers
	// without a token.
	n := startNode(t, memory.New(), "d1", "default", fmt.Sprintf(jobsYAML, "a")+"http: {open_reads: true}\n")
	for _, c := range []struct {
		method, path string
		status       int
		field, value string
	}{
		{"GET", "/api/v1/jobs?next=1000", 400, "next", `"1000"`},
		{"GET", "/api/v1/jobs?next=x", 400, "next", `"x"`},
		{"GET", "/api/v1/jobs?color=red", 400, "color", `"color"`},
		{"GET", "/api/v1/jobs?next=1&next=2", 400, "next", "2 times"},
		{"GET", "/api/v1/jobs/nope", 404, "job", `"nope"`},
		{"GET", "/api/v1/runs?state=done", 400, "state", `"done"`},
		{"GET", "/api/v1/runs?since=yesterday", 400, "since", `"yesterday"`},
		{"GET", "/api/v1/runs?before=2026-13-01T00:00:00Z", 400, "before", `"2026-13-01T00:00:00Z"`},
		{"GET", "/api/v1/runs?limit=0", 400, "limit", `"0"`},
		{"GET", "/api/v1/runs?cursor=abc", 400, "cursor", `"abc"`},
		{"GET", "/api/v1/runs?job=other", 404, "job", `"other"`},
		{"GET", "/api/v1/locks?limit=-1", 400, "limit", `"-1"`},
		{"GET", "/api/v1/locks?prefix=a//b", 400, "prefix", `"a//b"`},
		{"GET", "/api/v1/status?runs=5000", 400, "runs", `"5000"`},
		{"POST", "/api/v1/jobs/a-tick/trigger?key=bad%20key", 400, "key", `"bad key"`},
		{"POST", "/api/v1/jobs/nope/trigger", 404, "job", `"nope"`},
		{"POST", "/api/v1/jobs/nope/pause", 404, "job", `"nope"`},
		{"POST", "/api/v1/jobs/nope/resume", 404, "job", `"nope"`},
		{"POST", "/api/v1/leaders/other%2Frole/resign", 404, "role", `"other/role"`},
		{"POST", "/api/v1/leaders/..%2Fx/resign", 400, "role", `"../x"`},
		{"DELETE", "/api/v1/jobs", 405, "method", "DELETE"},
		{"GET", "/api/v1/jobs/a-tick/pause", 405, "method", "GET"},
		{"GET", "/api/v2/things", 404, "path", "/api/v2/things"},
	} {
		code, m := n.call(c.method, c.path, nil)
		msg, _ := m["error"].(string)
		if code != c.status || m["field"] != c.field || !strings.Contains(msg, c.value) {
			t.Errorf("%s %s = %d %v; want %d naming field %q and %s", c.method, c.path, code, m, c.status, c.field, c.value)
		}
	}
	// Requests a page on another site could make through the browser.
	for _, c := range []struct {
		method, path, header, value, field string
	}{
		{"POST", "/api/v1/jobs/a-tick/pause", "Origin", "http://evil.example", "Origin"},
		{"POST", "/api/v1/jobs/a-tick/trigger", "Origin", "null", "Origin"},
		{"GET", "/api/v1/status", "Host", "evil.example", "Host"},
		{"POST", "/api/v1/jobs/a-tick/pause", "Host", "evil.example:7070", "Host"},
	} {
		req, _ := http.NewRequest(c.method, n.url+c.path, nil)
		if c.header == "Host" {
			req.Host = c.value
		} else {
			req.Header.Set(c.header, c.value)
		}
		resp, err := n.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || m["field"] != c.field {
			t.Errorf("%s %s with %s %s = %d %v, want 403 naming %s", c.method, c.path, c.header, c.value, resp.StatusCode, m, c.field)
		}
	}
	// Nothing was paused or triggered by the rejected requests.
	var one admin.Job
	n.mustGet("/api/v1/jobs/a-tick", &one)
	if one.Paused {
		t.Fatal("a rejected request paused the job")
	}
}

// TestInstanceGone: a daemon that stops releases its instance lease; the
// other daemon's API lists it as gone, with when it was last seen alive.
func TestInstanceGone(t *testing.T) {
	b := memory.New()
	a := startNode(t, b, "d1", "default", fmt.Sprintf(jobsYAML, "a"))
	other := startNode(t, b, "d2", "default", fmt.Sprintf(jobsYAML, "a"))
	var inst struct{ Instances []admin.Instance }
	a.mustGet("/api/v1/instances", &inst)
	if len(inst.Instances) != 2 || !inst.Instances[1].Alive || inst.Instances[1].Instance != "d2" {
		t.Fatalf("instances = %+v", inst.Instances)
	}
	other.stop()
	inst.Instances = nil // decode afresh: absent fields would keep old values
	a.mustGet("/api/v1/instances", &inst)
	if len(inst.Instances) != 2 || inst.Instances[1].Alive || inst.Instances[1].LastSeen == "" || inst.Instances[1].LeaseExpiresAt != "" {
		t.Fatalf("instances after d2 stopped = %+v", inst.Instances)
	}
	if !inst.Instances[0].Alive || !inst.Instances[0].Self {
		t.Fatalf("d1 = %+v", inst.Instances[0])
	}
}
