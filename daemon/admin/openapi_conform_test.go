package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// TestOpenAPIResponsesConform: every operation of openapi.yaml is called
// on a real daemon — with its success and with the errors a client meets
// (no token, a read token on an action, a bad parameter, an unknown job or
// role, a used trigger key) — and every response is checked against the
// document: the status is declared for the operation (so is 401 for
// /metrics, which needs the read scope), and the body has every required
// field and no undeclared one (the document's objects are
// additionalProperties: false), a job's refused_on included (non-empty).
func TestOpenAPIResponsesConform(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	ids := map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.OperationID == "" {
				t.Errorf("%s %s has no operationId", method, path)
			} else if was, dup := ids[op.OperationID]; dup {
				t.Errorf("operationId %s on both %s and %s %s", op.OperationID, was, method, path)
			}
			ids[op.OperationID] = method + " " + path
		}
	}
	const readToken = "read-token-0123456789abcdef"
	const adminToken = "admin-token-0123456789abcdef"
	b := memory.New()
	defer b.Close()
	n := startNode(t, b, "oa", "openapi", fmt.Sprintf(`
grace: 1s
http:
  tokens:
    - {scope: read, token: %s}
    - {scope: admin, token: %s}
jobs:
  - name: tick
    schedule: "@every 200ms"
    command: {argv: [/bin/true]}
  - name: lead
    schedule: "@every 300ms"
    mode: leader
    command: {argv: [/bin/true]}
`, readToken, adminToken))
	// A run to read, and the leader role held.
	var page struct {
		Runs []struct {
			Job         string `json:"job"`
			ScheduledAt string `json:"scheduled_at"`
			State       string `json:"state"`
		} `json:"runs"`
	}
	n.token = adminToken
	eventually.True(t, 20*time.Second, "a finished run of tick and the leader elected", func() bool {
		n.mustGet("/api/v1/runs?job=tick&state=succeeded&limit=1", &page)
		var leaders struct {
			Leaders []struct{ Self bool } `json:"leaders"`
		}
		n.mustGet("/api/v1/leaders", &leaders)
		return len(page.Runs) == 1 && len(leaders.Leaders) == 1
	})
	at := url.PathEscape(page.Runs[0].ScheduledAt)
	// Another daemon states that it refuses its version of tick (the lease
	// schedule's refusal holder keeps, under the key of refusalKey in
	// schedule/refusal.go), so that the jobs' responses carry a non-empty
	// refused_on for the document to check.
	refusal := backend.Owner{Instance: "v-refused-elsewhere", Nonce: backend.NewNonce()}
	g, err := b.Acquire(context.Background(), "openapi:refused:tick"+backend.MetaSep+"eu/web-9", refusal, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(context.Background(), "openapi:refused:tick"+backend.MetaSep+"eu/web-9", refusal, g.Token)
	var tick struct {
		Cluster struct {
			RefusedOn []struct {
				Instance string `json:"instance"`
				Version  string `json:"version"`
			} `json:"refused_on"`
		} `json:"cluster"`
	}
	n.mustGet("/api/v1/jobs/tick", &tick)
	if r := tick.Cluster.RefusedOn; len(r) != 1 || r[0].Instance != "eu/web-9" || r[0].Version != refusal.Instance {
		t.Fatalf("tick's refused_on %+v, want eu/web-9 refusing %s", r, refusal.Instance)
	}
	type call struct {
		method, template, path, token string
	}
	calls := []call{
		{"GET", "/api/v1/status", "/api/v1/status", readToken},
		{"GET", "/api/v1/status", "/api/v1/status?runs=x", readToken},
		{"GET", "/api/v1/status", "/api/v1/status", ""},
		{"GET", "/api/v1/instances", "/api/v1/instances", readToken},
		{"GET", "/api/v1/leaders", "/api/v1/leaders", readToken},
		{"POST", "/api/v1/leaders/{role}/resign", "/api/v1/leaders/nope/resign", adminToken},
		{"POST", "/api/v1/leaders/{role}/resign", "/api/v1/leaders/schedule%2Fleader/resign", readToken},
		{"POST", "/api/v1/leaders/{role}/resign", "/api/v1/leaders/schedule%2Fleader/resign", adminToken},
		{"GET", "/api/v1/locks", "/api/v1/locks", readToken},
		{"GET", "/api/v1/locks", "/api/v1/locks?limit=0", readToken},
		{"GET", "/api/v1/jobs", "/api/v1/jobs", readToken},
		{"GET", "/api/v1/jobs", "/api/v1/jobs?next=-1", readToken},
		{"GET", "/api/v1/jobs/{job}", "/api/v1/jobs/tick", readToken},
		{"GET", "/api/v1/jobs/{job}", "/api/v1/jobs/nope", readToken},
		{"POST", "/api/v1/jobs/{job}/trigger", "/api/v1/jobs/tick/trigger?key=k1", readToken},
		{"POST", "/api/v1/jobs/{job}/trigger", "/api/v1/jobs/tick/trigger?key=k1", adminToken},
		{"POST", "/api/v1/jobs/{job}/trigger", "/api/v1/jobs/tick/trigger?key=k1", adminToken},
		{"POST", "/api/v1/jobs/{job}/trigger", "/api/v1/jobs/nope/trigger", adminToken},
		{"POST", "/api/v1/jobs/{job}/pause", "/api/v1/jobs/lead/pause", adminToken},
		{"POST", "/api/v1/jobs/{job}/trigger", "/api/v1/jobs/lead/trigger", adminToken},
		{"GET", "/api/v1/jobs/{job}", "/api/v1/jobs/lead", readToken},
		{"POST", "/api/v1/jobs/{job}/resume", "/api/v1/jobs/lead/resume", adminToken},
		{"POST", "/api/v1/jobs/{job}/resume", "/api/v1/jobs/nope/resume", adminToken},
		{"GET", "/api/v1/runs", "/api/v1/runs?limit=2", readToken},
		{"GET", "/api/v1/runs", "/api/v1/runs?job=nope", readToken},
		{"GET", "/api/v1/runs", "/api/v1/runs?state=bad", readToken},
		{"GET", "/api/v1/runs", "/api/v1/runs?instance=oa&limit=3", readToken},
		{"GET", "/api/v1/jobs/{job}/instants", "/api/v1/jobs/tick/instants", readToken},
		{"GET", "/api/v1/jobs/{job}/instants", "/api/v1/jobs/tick/instants?since=x", readToken},
		{"GET", "/api/v1/jobs/{job}/instants", "/api/v1/jobs/nope/instants", readToken},
		{"GET", "/api/v1/runs/{job}/{at}", "/api/v1/runs/tick/" + at, readToken},
		{"GET", "/api/v1/runs/{job}/{at}", "/api/v1/runs/tick/2001-01-01T00:00:00Z", readToken},
		{"GET", "/api/v1/runs/{job}/{at}", "/api/v1/runs/tick/yesterday", readToken},
		{"GET", "/api/v1/proof", "/api/v1/proof", ""},
		{"GET", "/metrics", "/metrics", ""},
		{"GET", "/metrics", "/metrics", readToken},
		{"GET", "/healthz", "/healthz", ""},
		{"GET", "/readyz", "/readyz", ""},
		{"GET", "/openapi.yaml", "/openapi.yaml", ""},
		{"GET", "/", "/", ""},
		{"GET", "/dashboard/app.js", "/dashboard/app.js", ""},
		{"GET", "/dashboard/style.css", "/dashboard/style.css", ""},
		{"GET", "/dashboard/runs.js", "/dashboard/runs.js", ""},
		{"GET", "/dashboard/axis.js", "/dashboard/axis.js", ""},
	}
	called := map[string]map[int]bool{}
	for _, c := range calls {
		req, err := http.NewRequest(c.method, n.url+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := n.client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		item := doc.Paths.Value(c.template)
		if item == nil {
			t.Fatalf("%s is not in the document", c.template)
		}
		op := item.GetOperation(c.method)
		if op == nil {
			t.Fatalf("%s %s is not in the document", c.method, c.template)
		}
		key := c.method + " " + c.template
		if called[key] == nil {
			called[key] = map[int]bool{}
		}
		called[key][resp.StatusCode] = true
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{
				Request: req,
				Route:   &routers.Route{Spec: doc, Path: c.template, PathItem: item, Method: c.method, Operation: op},
			},
			Status: resp.StatusCode,
			Header: resp.Header,
			Body:   io.NopCloser(bytes.NewReader(body)),
			Options: &openapi3filter.Options{
				IncludeResponseStatus: true, // a status the operation does not declare fails
				MultiError:            true,
			},
		}
		if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
			var pretty bytes.Buffer
			if json.Indent(&pretty, body, "", "  ") != nil {
				pretty.Reset()
				pretty.Write(body[:min(len(body), 400)])
			}
			t.Errorf("%s %s (token %v): %d does not conform to the document: %v\n%s", c.method, c.path, c.token != "", resp.StatusCode, err, pretty.String())
		}
	}
	// Every operation was called.
	var missing []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if called[method+" "+path] == nil {
				missing = append(missing, method+" "+path)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("operations the test does not call: %s", strings.Join(missing, ", "))
	}
	if !called["GET /metrics"][http.StatusUnauthorized] {
		t.Error("GET /metrics without a token did not answer 401")
	}
}
