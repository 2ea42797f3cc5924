package main

import (
	"encoding/json"
	"fmt"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestDemo(t *testing.T) {
	e := newEnv(t)
	r := e.expect(0, "demo", "--dir", e.dir)
	for _, want := range []string{"killed demo-", "ran it again with token", "0 missed", "0 of the completed occurrences disagree", "OK:"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("demo output lacks %q:\n%s", want, r.stdout)
		}
	}
}

// daemonConfig writes a config with a command job (the demo job, no shell)
// and an http job, both every second.
func daemonConfig(e *env, url string) string {
	conf := e.path("leasehold.yaml")
	data := fmt.Sprintf(`backend: %s
grace: 5s
jobs:
  - name: tick
    schedule: "@every 1s"
    lease_ttl: 2s
    command: {argv: [%q, demo-job, --took, 300ms, %q]}
  - name: call
    schedule: "@every 1s"
    lease_ttl: 2s
    http: {method: POST, url: %q, expect: 204}
`, e.url, bin, e.path("effects.log"), url)
	if err := os.WriteFile(conf, []byte(data), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return conf
}

type calls struct {
	mu   sync.Mutex
	keys map[string][]string // Idempotency-Key -> tokens
}

func (c *calls) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	k := r.Header.Get("Idempotency-Key")
	c.keys[k] = append(c.keys[k], r.Header.Get("Leasehold-Token")+"/"+r.Header.Get("Leasehold-Attempt"))
	c.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// TestDaemonsEndToEnd: 3 daemons as OS processes on one SQLite file; one is
// killed with SIGKILL and one stopped with SIGTERM mid-way. Every occurrence
// in the window completed once, by what the jobs themselves wrote; a run cut
// by the SIGKILL appears again only as attempt 2 with a greater token (also
// when the cut run had written its end: at least once).
func TestDaemonsEndToEnd(t *testing.T) {
	e := newEnv(t)
	c := &calls{keys: map[string][]string{}}
	srv := httptest.NewServer(c)
	defer srv.Close()
	conf := daemonConfig(e, srv.URL)
	var ps []*proc
	for i := range 3 {
		ps = append(ps, e.start("run", "--config", conf, "--instance", fmt.Sprint("d", i), "--http", "off"))
	}
	effects := e.path("effects.log")
	count := func() int { return len(readDemo(effects)) }
	eventually.True(t, 30*time.Second, "4 runs", func() bool { return count() >= 8 })
	_ = ps[0].cmd.Process.Signal(syscall.SIGKILL)
	_ = ps[1].cmd.Process.Signal(syscall.SIGTERM)
	if code := ps[1].wait(t, 20*time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d; stderr: %s", code, ps[1].stderr.String())
	}
	n := count()
	eventually.True(t, 30*time.Second, "runs on the survivor", func() bool { return count() >= n+10 })
	// The run the SIGKILL cut is reclaimed once its lease lapses; wait for
	// every started occurrence to have an end before the last stop, so a
	// gap below is a miss and not a reclaim still due.
	eventually.True(t, 30*time.Second, "the cut run's retry", func() bool {
		ended := map[string]bool{}
		ls := readDemo(effects)
		for _, l := range ls {
			if l.event == "end" {
				ended[l.at] = true
			}
		}
		for _, l := range ls {
			if l.event == "start" && l.instance == "d0" && !ended[l.at] {
				return false
			}
		}
		return true
	})
	_ = ps[2].cmd.Process.Signal(syscall.SIGTERM)
	ps[2].wait(t, 20*time.Second)

	type occ struct{ starts, ends []demoLine }
	occs := map[string]*occ{}
	for _, l := range readDemo(effects) {
		o := occs[l.at]
		if o == nil {
			o = &occ{}
			occs[l.at] = o
		}
		if l.event == "start" {
			o.starts = append(o.starts, l)
		} else {
			o.ends = append(o.ends, l)
		}
	}
	var ats []time.Time
	for at, o := range occs {
		// Twice only as crash policy retry promises (at least once): the
		// killed daemon's job wrote its end and the daemon died before it
		// recorded the finish (the kill comes right after a line is seen,
		// so it can land there), and the reclaim ran it again as attempt 2
		// with a greater token.
		if len(o.ends) > 2 || len(o.ends) == 2 && (o.ends[0].instance != "d0" || o.ends[0].attempt != 1 ||
			o.ends[1].attempt != 2 || o.ends[1].token <= o.ends[0].token) {
			t.Fatalf("occurrence %s completed %d times, not as a retry after the SIGKILL of d0: %+v", at, len(o.ends), o.ends)
		}
		if len(o.ends) > 0 { // a documented retry covers its occurrence too
			tm, _ := time.Parse("2006-01-02T15:04:05.000Z07:00", at)
			ats = append(ats, tm)
		}
		if len(o.starts) == 2 && (o.starts[1].attempt != 2 || o.starts[1].token <= o.starts[0].token) {
			t.Fatalf("occurrence %s ran twice without a retry's greater token: %+v", at, o.starts)
		}
	}
	sortTimes(ats)
	for i := 1; i < len(ats); i++ {
		if ats[i].Sub(ats[i-1]) != time.Second {
			t.Fatalf("occurrences missed between %v and %v; effects:\n%s", ats[i-1], ats[i], readFile(effects))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, toks := range c.keys {
		if len(toks) > 2 || (len(toks) == 2 && !strings.HasSuffix(toks[1], "/2")) {
			t.Fatalf("http occurrence %s called %v", k, toks)
		}
	}
	if len(c.keys) < 8 {
		t.Fatalf("only %d http occurrences", len(c.keys))
	}
	// History and next occurrences through the CLI.
	r := e.expect(0, "runs", "--job", "tick", "--json")
	var rows []runInfo
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) < len(ats)-1 {
		t.Fatalf("runs --json: %v, %d rows for %d occurrences: %s", err, len(rows), len(ats), r.stdout)
	}
	r = e.expect(0, "jobs", "--config", conf)
	if !strings.Contains(r.stdout, "tick") || !strings.Contains(r.stdout, "@every 1s") {
		t.Fatalf("jobs: %s", r.stdout)
	}
}

func sortTimes(a []time.Time) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j].Before(a[j-1]); j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

func TestRunConfigErrors(t *testing.T) {
	e := newEnv(t)
	conf := e.path("bad.yaml")
	_ = os.WriteFile(conf, []byte("jobs:\n  - name: r\n    schedule: \"99 * * * *\"\n    command: {argv: [x]}\n"), 0o644)
	r := e.expect(ExitUsage, "run", "--config", conf)
	if !strings.Contains(r.stderr, "bad.yaml:3: jobs[0].schedule") || !strings.Contains(r.stderr, `"99 * * * *"`) {
		t.Fatalf("stderr: %s", r.stderr)
	}
	r = e.expect(ExitUsage, "runs", "--state", "bogus")
	if !strings.Contains(r.stderr, `--state "bogus"`) {
		t.Fatalf("stderr: %s", r.stderr)
	}
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
