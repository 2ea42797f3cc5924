package admin_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

// incidentJobs: a job that always succeeds, one that fails every attempt
// (with more output than the ledger keeps, so its head and tail are kept)
// and is retried twice, and a slower one. Leases are long enough that a
// loaded machine (CI, -race) loses none: an attempt lost to a recovery
// would have no record of its error.
const incidentJobs = `
grace: 2s
jobs:
  - name: ok
    schedule: "@every 1s"
    lease_ttl: 10s
    command: {argv: [/bin/true]}
  - name: flaky
    schedule: "@every 3s"
    lease_ttl: 10s
    retry: {max: 2, backoff: 200ms}
    command: {argv: [/bin/sh, -c, 'seq 1 5000; echo "attempt $LEASEHOLD_ATTEMPT on $LEASEHOLD_INSTANCE: disk full"; exit 3']}
  - name: report
    schedule: "@every 2s"
    lease_ttl: 10s
    command: {argv: [/bin/sleep, "0.3"]}
`

// incident is two daemons on one SQLite database after a bad minute: a
// job whose every attempt failed, a job paused for a few instants (missed)
// and one of its instants run late (by a third instance, "web-9").
type incident struct {
	nodes  []*node
	failed admin.Run // a run of flaky that failed its last attempt (3)
	lateAt time.Time // the instant of ok run late
}

func startIncident(t *testing.T) *incident {
	t.Helper()
	ctx := context.Background()
	b, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "leasehold.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	in := &incident{}
	for _, name := range []string{"web-1", "web-2"} {
		in.nodes = append(in.nodes, startNode(t, b, name, "default", incidentJobs))
	}
	n := in.nodes[0]
	eventually.True(t, 90*time.Second, "a run of flaky that failed its third attempt", func() bool {
		var p admin.RunPage
		code, _ := n.call("GET", "/api/v1/runs?job=flaky&state=failed&limit=20", &p) // a 502 under load: ask again
		for _, r := range p.Runs {
			if code == 200 && r.Attempt == 3 {
				in.failed = r
				return true
			}
		}
		return false
	})
	// Pause ok for a few of its instants: nothing runs them (missed),
	// except one that a third instance claims late.
	if code, m := n.call("POST", "/api/v1/jobs/ok/pause", nil); code != 200 {
		t.Fatalf("pause = %d %v", code, m)
	}
	paused := time.Now()
	in.lateAt = paused.Truncate(time.Second).Add(2 * time.Second)
	eventually.True(t, 30*time.Second, "four instants of ok passed while it is paused", func() bool {
		return time.Since(paused) > 4*time.Second
	})
	var job admin.Job
	n.mustGet("/api/v1/jobs/ok", &job)
	l := schedule.NamespaceLedger(b, "default")
	owner := backend.Owner{Instance: "web-9", Nonce: backend.NewNonce()}
	g, err := l.Claim(ctx, backend.ClaimRequest{Job: "ok", ScheduledAt: in.lateAt, SpecVersion: job.Version, Owner: owner, TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("late claim of ok at %v: %v", in.lateAt, err)
	}
	if err := l.Finish(ctx, backend.FinishRequest{Job: "ok", ScheduledAt: in.lateAt, Owner: owner, Token: g.Token,
		Outcome: backend.Outcome{State: backend.Succeeded, Duration: 40 * time.Millisecond, Result: "caught up by hand"}}); err != nil {
		t.Fatal(err)
	}
	if code, m := n.call("POST", "/api/v1/jobs/ok/resume", nil); code != 200 {
		t.Fatalf("resume = %d %v", code, m)
	}
	return in
}

// axis reads job's time axis over the last window.
func (n *node) axis(job string, window time.Duration) admin.JobInstants {
	n.t.Helper()
	now := time.Now()
	var a admin.JobInstants
	n.mustGet("/api/v1/jobs/"+job+"/instants?since="+now.Add(-window).UTC().Format(time.RFC3339Nano)+"&before="+now.UTC().Format(time.RFC3339Nano), &a)
	return a
}

// marks counts an axis's instants by state, and the late ones.
func marks(a admin.JobInstants) map[string]int {
	m := map[string]int{}
	for _, i := range a.Instants {
		m[i.State]++
		if i.Late {
			m["late"]++
		}
	}
	return m
}

func hasAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
