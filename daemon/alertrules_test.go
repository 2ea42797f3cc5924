package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/schedule"
)

// rulesFile is the example alerting rules, and its promtool unit tests.
const (
	rulesFile     = "../docs/alerts/leasehold-rules.yml"
	rulesTestFile = "../docs/alerts/leasehold-rules.test.yml"
)

// promtool returns promtool's path; without it the test is skipped, or
// fails under CI=true (scripts/test installs Debian's prometheus package,
// which has it).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool is not installed (Debian: apt-get install prometheus): %v", err)
		}
		t.Skipf("promtool is not installed (Debian: apt-get install prometheus): %v", err)
	}
	return p
}

// TestAlertRulesPromtool: the example rules are valid (promtool check
// rules) and fire as their unit tests say (promtool test rules).
func TestAlertRulesPromtool(t *testing.T) {
	t.Parallel()
	tool := promtool(t)
	for _, args := range [][]string{{"check", "rules", filepath.Base(rulesFile)}, {"test", "rules", filepath.Base(rulesTestFile)}} {
		cmd := exec.Command(tool, args...)
		cmd.Dir = filepath.Dir(rulesFile)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// scrape parses a Prometheus text exposition into "name{labels}" -> value.
func scrape(t *testing.T, d *Daemon, token string) map[string]float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+d.AdminAddr().String()+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	out := map[string]float64{}
	for _, l := range strings.Split(string(body), "\n") {
		i := strings.LastIndexByte(l, ' ')
		if l == "" || l[0] == '#' || i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", l, err)
		}
		out[l[:i]] = v
	}
	return out
}

// TestJobHealthMetricsAndAlertRules: two daemons share a job that fails
// and one that succeeds. Once both jobs are paused, each daemon's
// /metrics gives the run health the ledger records — the same on both,
// whichever ran the occurrences — and every metric the example alert
// rules use is one a daemon exports.
func TestJobHealthMetricsAndAlertRules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "d.db")
	const token = "read-token-0123456789abcdef"
	conf := func(instance string) string {
		return fmt.Sprintf(`
instance: %s
http:
  listen: 127.0.0.1:0
  tokens: [{scope: admin, token: %s}]
jobs:
  - name: broken
    schedule: "@every 1s"
    command: {argv: ["false"]}
  - name: fine
    schedule: "@every 1s"
    command: {argv: ["true"]}
`, instance, token)
	}
	var daemons []*Daemon
	for _, name := range []string{"web-1", "web-2"} {
		d, _ := hookDaemon(t, dir, db, name, conf(name), io.Discard)
		daemons = append(daemons, d)
	}
	b, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l := schedule.NamespaceLedger(b, "default")
	runs := func(job string, state backend.RunState) []backend.Run {
		t.Helper()
		rs, err := l.ListRuns(context.Background(), backend.RunFilter{Job: job, State: state, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	eventually.True(t, 60*time.Second, "3 failed and 1 succeeded occurrences", func() bool {
		return len(runs("broken", backend.Failed)) >= 3 && len(runs("fine", backend.Succeeded)) >= 1
	})
	for _, job := range []string{"broken", "fine"} {
		if err := daemons[0].Scheduler().Pause(context.Background(), job); err != nil {
			t.Fatal(err)
		}
	}
	var last map[string]float64
	eventually.True(t, 60*time.Second, "both daemons export the ledger's run health", func() bool {
		if len(runs("broken", backend.Running))+len(runs("fine", backend.Running)) > 0 {
			return false // a run started before the pause is still running
		}
		fails, ok := len(runs("broken", backend.Failed)), runs("fine", backend.Succeeded)
		lastOK := float64(ok[0].FinishedAt.UnixMilli()) / 1000
		for _, d := range daemons {
			m := scrape(t, d, token)
			last = m
			want := map[string]float64{
				`leasehold_job_consecutive_failures{job="broken",namespace="default"}`:             float64(fails),
				`leasehold_job_last_run_state{job="broken",namespace="default",state="failed"}`:    1,
				`leasehold_job_last_run_state{job="broken",namespace="default",state="succeeded"}`: 0,
				`leasehold_job_consecutive_failures{job="fine",namespace="default"}`:               0,
				`leasehold_job_last_run_state{job="fine",namespace="default",state="succeeded"}`:   1,
				`leasehold_job_last_success_timestamp_seconds{job="fine",namespace="default"}`:     lastOK,
				`leasehold_job_running_anywhere{job="fine",namespace="default"}`:                   0,
				`leasehold_job_state{job="fine",namespace="default",state="paused"}`:               1,
			}
			for k, v := range want {
				if got, ok := m[k]; !ok || math.Abs(got-v) > 1e-3 {
					return false
				}
			}
			if _, ok := m[`leasehold_job_last_success_timestamp_seconds{job="broken",namespace="default"}`]; ok {
				t.Fatal("a job that never succeeded has a last success")
			}
		}
		return true
	})
	exported := map[string]bool{}
	for k := range last {
		exported[strings.TrimSuffix(strings.TrimSuffix(k[:strings.IndexAny(k+"{", "{")], "_count"), "_sum")] = true
	}
	for name := range allMetricNames(t) {
		exported[name] = true
	}
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var used []string
	for _, l := range strings.Split(string(rules), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			used = append(used, regexp.MustCompile(`\bleasehold_[a-z_]+\b`).FindAllString(l, -1)...)
		}
	}
	slices.Sort(used)
	for _, name := range slices.Compact(used) {
		if !exported[name] {
			t.Errorf("%s uses %s, which no daemon exports", rulesFile, name)
		}
	}
}

// allMetricNames gathers the names of package metrics' collectors (which
// a daemon registers) after one event of each kind: its counters have no
// sample until their first event, so a scrape of a quiet daemon lacks them.
func allMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	for k := schedule.EventClaim; k <= schedule.EventRetry; k++ {
		m.ObserveSchedule(schedule.Event{Kind: k, Namespace: "n", Job: "j", Result: "x", Err: errors.New("e")})
	}
	for k := leasehold.EventKind(1); k < 16; k++ {
		m.ObserveLock(leasehold.Event{Kind: k, Namespace: "n", Role: "r", Backend: "b", Result: "x"})
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	return names
}
