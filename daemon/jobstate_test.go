package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// TestRevertShowsEverywhere: three daemons run a job every second; one is
// reloaded with every 2 s, then reverted to every second (a git revert).
// The revert is refused on that daemon (versions only move forward) and
// the job then runs nowhere: the replaced version is the others', the
// applying one nobody's. Every daemon must say so — in its jobs API, and
// its metrics — not just the refused one's log, and the refused one must
// say exactly what to do: set `revision:` in its config file. Every daemon
// names where the revert is refused (web-1), in the API and a metric.
func TestRevertShowsEverywhere(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "d.db")
	const secret = "read-token-0123456789abcdef"
	conf := func(instance, spec string) *Config {
		t.Helper()
		yml := fmt.Sprintf(`
instance: %s
grace: 1s
http:
  listen: 127.0.0.1:0
  tokens:
    - {scope: admin, token: %s}
jobs:
  - name: report
    schedule: %q
    command: {argv: ["true"]}
`, instance, secret, spec)
		cfg, err := Parse(filepath.Join(dir, instance+".yaml"), []byte(yml))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	type node struct {
		d    *Daemon
		logs *testkit.Buffer
	}
	var nodes []node
	for _, name := range []string{"web-1", "web-2", "web-3"} {
		b, err := sqlite.Open(context.Background(), db)
		if err != nil {
			t.Fatal(err)
		}
		logs := &testkit.Buffer{}
		d, err := New(conf(name, "@every 1s"), b, slog.New(slog.NewTextHandler(logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done; b.Close() })
		select {
		case <-d.Ready():
		case err := <-done:
			done <- nil
			t.Fatalf("%s stopped: %v", name, err)
		case <-time.After(20 * time.Second):
			t.Fatalf("%s not ready in 20s", name)
		}
		nodes = append(nodes, node{d, logs})
	}
	get := func(d *Daemon, path string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+d.AdminAddr().String()+path, nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return string(body)
	}
	job := func(d *Daemon) admin.Job {
		t.Helper()
		var j admin.Job
		if err := json.Unmarshal([]byte(get(d, "/api/v1/jobs/report")), &j); err != nil {
			t.Fatal(err)
		}
		return j
	}
	web1 := nodes[0].d
	eventually.True(t, 20*time.Second, "every daemon shows the job active and running", func() bool {
		for _, n := range nodes {
			if j := job(n.d); j.State != admin.JobActive || j.Cluster == nil || !j.Cluster.Running || j.LastClaimed == "" {
				return false
			}
		}
		return true
	})
	if err := web1.Reload(conf("web-1", "@every 2s")); err != nil {
		t.Fatal(err)
	}
	var b admin.Job
	eventually.True(t, 20*time.Second, "web-1 records the every-2s version", func() bool {
		b = job(web1)
		return b.State == admin.JobPending || (b.State == admin.JobActive && b.Cluster.Version == b.Version)
	})
	if err := web1.Reload(conf("web-1", "@every 1s")); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "web-1 refuses the revert", func() bool { return job(web1).State == admin.JobRefused })
	refusedVersion := job(web1).Version
	// The every-2s version applies from its switch instant, at most ten
	// seconds ahead; no daemon runs it.
	eventually.True(t, 40*time.Second, "every daemon shows the job runs nowhere", func() bool {
		for _, n := range nodes {
			if j := job(n.d); j.Cluster == nil || j.Cluster.Running || j.Cluster.Version != b.Version {
				return false
			}
		}
		return true
	})
	for i, n := range nodes {
		j := job(n.d)
		want := admin.JobSuperseded
		if i == 0 {
			want = admin.JobRefused
		}
		if j.State != want || !strings.Contains(j.Cluster.Note, "NOT RUNNING ANYWHERE") || j.Cluster.Schedule != "@every 2s" {
			t.Errorf("web-%d: state %q (want %q), cluster %+v", i+1, j.State, want, j.Cluster)
		}
		if !strings.Contains(j.StateNote, "`revision:`") {
			t.Errorf("web-%d: the state note does not say to set `revision:`: %q", i+1, j.StateNote)
		}
		// Every daemon names where the revert is refused: web-1, with
		// its refused version and schedule.
		if r := j.Cluster.RefusedOn; len(r) != 1 || r[0].Instance != "web-1" || r[0].Version != refusedVersion || r[0].Schedule != "@every 1s" {
			t.Errorf("web-%d: refused_on %+v, want web-1 refusing version %s (@every 1s)", i+1, r, refusedVersion)
		}
		if !strings.Contains(j.Cluster.Note, "refused on web-1") {
			t.Errorf("web-%d: the cluster note does not say where the version is refused: %q", i+1, j.Cluster.Note)
		}
		m := get(n.d, "/metrics")
		for _, line := range []string{
			`leasehold_job_refused_instances{job="report",namespace="default"} 1`,
			`leasehold_job_running_anywhere{job="report",namespace="default"} 0`,
			fmt.Sprintf(`leasehold_job_state{job="report",namespace="default",state=%q} 1`, want),
		} {
			if !strings.Contains(m, line) {
				t.Errorf("web-%d: /metrics lacks %s", i+1, line)
			}
		}
	}
	if log := nodes[0].logs.String(); !strings.Contains(log, "set `revision: 1` on the job in "+filepath.Join(dir, "web-1.yaml")) {
		t.Errorf("web-1's log does not say which revision to set in which file:\n%s", log)
	}
}
