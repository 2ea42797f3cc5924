package admin_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// TestRunsAndLocksShowNoSchedulerState: the scheduler keeps a job's
// versions, pause state and trigger keys in the record store, and an
// earlier release kept them as runs under reserved names ("<job>!…", many
// dated at the epoch); the runs list shows runs only, and the locks list marks the daemon's own instance lease as kind
// "instance", apart from users' locks.
func TestRunsAndLocksShowNoSchedulerState(t *testing.T) {
	b := memory.New()
	t.Cleanup(func() { b.Close() })
	n := startNode(t, b, "m1", "default", strings.ReplaceAll(jobsYAML, "%[1]s", "m"))
	if code, m := n.call("POST", "/api/v1/jobs/m-lead/pause", nil); code/100 != 2 {
		t.Fatalf("pause = %d %v", code, m)
	}
	if code, m := n.call("POST", "/api/v1/jobs/m-lead/resume", nil); code/100 != 2 {
		t.Fatalf("resume = %d %v", code, m)
	}
	if code, m := n.call("POST", "/api/v1/jobs/m-tick/trigger?key=k1", nil); code != http.StatusAccepted {
		t.Fatalf("trigger = %d %v", code, m)
	}
	ctx := t.Context()
	// The metadata is in the record store…
	for _, name := range []string{"m-tick!version", "m-lead!pause!default", "m-tick!trigger!k1"} {
		eventually.True(t, 10*time.Second, name+" recorded", func() bool {
			rs, err := b.ListRecords(ctx, backend.ListRecordsRequest{Name: name})
			return err == nil && len(rs) > 0
		})
	}
	// …with a run under such a name as an earlier release kept them
	// (docs/records.md)…
	o := backend.Owner{Instance: "earlier", Nonce: backend.NewNonce()}
	old, err := b.Claim(ctx, backend.ClaimRequest{Job: "m-tick!trigger!k0", ScheduledAt: time.UnixMilli(1), Owner: o, TTL: time.Minute, MaxEarly: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Finish(ctx, backend.FinishRequest{Job: "m-tick!trigger!k0", ScheduledAt: time.UnixMilli(1), Owner: o, Token: old.Token, Outcome: backend.Outcome{State: backend.Succeeded}}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "runs of m-tick recorded", func() bool {
		var p admin.RunPage
		n.mustGet("/api/v1/runs?job=m-tick&state=succeeded", &p)
		return len(p.Runs) > 0
	})
	// …and not in the runs the API lists.
	var p admin.RunPage
	n.mustGet("/api/v1/runs?limit=1000", &p)
	if len(p.Runs) == 0 {
		t.Fatal("no runs listed")
	}
	for _, r := range p.Runs {
		at, err := time.Parse(time.RFC3339Nano, r.ScheduledAt)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(r.Job, "!") || at.Year() < 2000 {
			t.Fatalf("the runs list holds scheduler state: %+v", r)
		}
	}
	for _, q := range []string{"m-tick!version", "m-lead!pause!default", "m-tick!superseded!0123456789abcdef"} {
		if code, _ := n.call("GET", "/api/v1/runs?job="+q, nil); code != http.StatusNotFound {
			t.Fatalf("runs?job=%s = %d, want 404: it is not a job", q, code)
		}
	}

	var locks struct {
		Locks []admin.Lock `json:"locks"`
	}
	n.mustGet("/api/v1/locks", &locks)
	kinds := map[string]string{}
	for _, l := range locks.Locks {
		kinds[l.Key] = l.Kind
	}
	if kinds["instances/m1"] != admin.LockKindInstance {
		t.Fatalf("the daemon's instance lease is listed as %q, want %q: %+v", kinds["instances/m1"], admin.LockKindInstance, locks)
	}
	for k, kind := range kinds {
		if !strings.HasPrefix(k, "instances/") && kind != admin.LockKindUser {
			t.Fatalf("lock %q is of kind %q, want %q", k, kind, admin.LockKindUser)
		}
	}
}
