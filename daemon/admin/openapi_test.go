package admin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/schedule"
)

// TestOpenAPIMatchesRoutes: every route the mux serves is in openapi.yaml
// and every operation there is served.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string                            `yaml:"openapi"`
		Paths   map[string]map[string]interface{} `yaml:"paths"`
	}
	if err := yaml.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	var inDoc, served []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			// Operations of handlers mounted with WithHandler (metrics,
			// health) are marked x-leasehold-mounted: the daemon serves them,
			// not this route table.
			if m, ok := op.(map[string]interface{}); ok && m["x-leasehold-mounted"] == true {
				continue
			}
			switch method {
			case "get", "post", "put", "delete", "patch":
				inDoc = append(inDoc, strings.ToUpper(method)+" "+path)
			}
		}
	}
	b := memory.New()
	sched, err := schedule.New(b, schedule.WithInstance("x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sched.Register(schedule.Job{Name: "j", Schedule: "@daily", Func: func(_ context.Context, _ schedule.Run) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	if err := sched.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer sched.Shutdown(context.Background())
	s, err := New(b, sched)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range s.routes() {
		p := rt.path
		if p == "/{$}" {
			p = "/"
		}
		served = append(served, rt.method+" "+p)
		// The mux really serves it: not the JSON 404 or 405 fallbacks.
		req := httptest.NewRequest(rt.method, strings.NewReplacer("{job}", "j", "{role}", "schedule%2Fleader", "{at}", "2026-01-01T00:00:00Z").Replace(p), nil)
		req.Host = "127.0.0.1:7070"
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		proofServed := p == ProofPath && rec.Code == http.StatusBadRequest && strings.Contains(rec.Body.String(), `"challenge"`) || // its own answer to no challenge
			strings.HasPrefix(p, "/api/v1/runs/") && rec.Code == http.StatusNotFound && strings.Contains(rec.Body.String(), `"scheduled_at"`) // no such run
		if rec.Code != http.StatusOK && rec.Code != http.StatusAccepted && rec.Code != http.StatusConflict && !proofServed {
			t.Errorf("%s %s is in the route table but not served: %d %s", rt.method, p, rec.Code, rec.Body)
		}
	}
	sort.Strings(inDoc)
	sort.Strings(served)
	if strings.Join(inDoc, "\n") != strings.Join(served, "\n") {
		t.Fatalf("openapi.yaml and the routes differ:\nin the document:\n  %s\nserved:\n  %s", strings.Join(inDoc, "\n  "), strings.Join(served, "\n  "))
	}
}
