package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// TestNamespaceIsolation: two daemons in different namespaces share one
// backend. Each API shows only its own namespace and cannot act on the
// other's jobs or roles.
func TestNamespaceIsolation(t *testing.T) {
	b := memory.New()
	a := startNode(t, b, "a1", "team-a", fmt.Sprintf(jobsYAML, "a"))
	bn := startNode(t, b, "b1", "team-b", fmt.Sprintf(jobsYAML, "b"))
	// A lock in team-b's namespace, held by an application.
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance("app-b"), leasehold.WithNamespace("team-b"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := lk.Acquire(context.Background(), "billing/run")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())

	var stB admin.Status
	eventually.True(t, 20*time.Second, "both namespaces leading and running", func() bool {
		var stA admin.Status
		a.mustGet("/api/v1/status", &stA)
		bn.mustGet("/api/v1/status", &stB)
		return len(stA.Leaders) == 1 && len(stB.Leaders) == 1 && len(stA.Runs) > 0 && len(stB.Runs) > 0
	})
	bToken := stB.Leaders[0].Token

	var st admin.Status
	a.mustGet("/api/v1/status?runs=1000", &st)
	if len(st.Instances) != 1 || st.Instances[0].Instance != "a1" {
		t.Errorf("team-a sees instances %+v", st.Instances)
	}
	if len(st.Leaders) != 1 || st.Leaders[0].Instance != "a1" {
		t.Errorf("team-a sees leaders %+v", st.Leaders)
	}
	for _, k := range st.Locks {
		if k.Instance != "a1" || strings.Contains(k.Key, "billing") {
			t.Errorf("team-a sees lock %+v", k)
		}
	}
	for _, j := range st.Jobs {
		if !strings.HasPrefix(j.Name, "a-") {
			t.Errorf("team-a sees job %+v", j)
		}
	}
	for _, r := range st.Runs {
		if !strings.HasPrefix(r.Job, "a-") || r.Instance != "a1" {
			t.Errorf("team-a sees run %+v", r)
		}
	}
	var locks struct{ Locks []admin.Lock }
	a.mustGet("/api/v1/locks?prefix=billing/", &locks)
	if len(locks.Locks) != 0 {
		t.Errorf("team-a lists team-b's lock: %+v", locks)
	}

	// Untouchable: team-b's jobs and role through team-a's API.
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/api/v1/jobs/b-tick", http.StatusNotFound},
		{"GET", "/api/v1/runs?job=b-tick", http.StatusNotFound},
		{"GET", "/api/v1/runs?job=b-tick!trigger!x", http.StatusNotFound},
		{"POST", "/api/v1/jobs/b-tick/trigger?key=k1", http.StatusNotFound},
		{"POST", "/api/v1/jobs/b-tick/pause", http.StatusNotFound},
		{"POST", "/api/v1/jobs/b-tick/resume", http.StatusNotFound},
	} {
		if code, m := a.call(c.method, c.path, nil); code != c.want || m["field"] != "job" {
			t.Errorf("team-a %s %s = %d %v, want %d", c.method, c.path, code, m, c.want)
		}
	}
	// Resigning through team-a's API resigns team-a's own leadership only.
	if code, m := a.call("POST", "/api/v1/leaders/schedule%2Fleader/resign", nil); code != http.StatusOK {
		t.Fatalf("team-a resign = %d %v", code, m)
	}
	bn.mustGet("/api/v1/status", &stB)
	var one admin.Job
	bn.mustGet("/api/v1/jobs/b-tick", &one)
	if len(stB.Leaders) != 1 || stB.Leaders[0].Instance != "b1" || stB.Leaders[0].Token != bToken || one.Paused {
		t.Fatalf("team-b changed by team-a's API: leaders %+v, job %+v", stB.Leaders, one)
	}
	// And team-b's trigger key k1 is still unused.
	if code, m := bn.call("POST", "/api/v1/jobs/b-tick/trigger?key=k1", nil); code != http.StatusAccepted {
		t.Fatalf("team-b trigger = %d %v", code, m)
	}
}
