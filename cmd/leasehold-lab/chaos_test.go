package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestChaosUsage(t *testing.T) {
	e := newEnv(t)
	for _, args := range [][]string{
		{"chaos", "--backend", e.url, "--faults", "kill,bogus"},
		{"chaos", "--backend", e.url, "--instances", "1"},
		{"chaos", "--backend", e.url, "--duration", "-1s"},
	} {
		r := e.run(args...)
		if r.code != ExitUsage {
			t.Errorf("%v: exit %d, want %d; stderr %q", args, r.code, ExitUsage, r.stderr)
		}
	}
	if r := e.run("chaos", "--backend", e.url, "--faults", "kill,bogus"); !strings.Contains(r.stderr, `"bogus"`) {
		t.Errorf("the error does not name the bad fault: %q", r.stderr)
	}
	if _, err := os.Stat(e.path("leasehold.db")); err == nil {
		t.Errorf("a rejected command created the database")
	}
}

// TestChaosCommand: a short run over SQLite with kills and pauses passes
// and writes its reports; the negative control fails with exit 1.
func TestChaosCommand(t *testing.T) {
	e := newEnv(t)
	out := e.path("run")
	r := e.run("chaos", "--backend", e.url, "--instances", "3", "--duration", "3s", "--faults", "kill,pause", "--seed", "2", "--out", out)
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "chaos PASS") {
		t.Errorf("no PASS in the summary:\n%s", r.stdout)
	}
	var run struct {
		Applied []struct{ Kind string } `json:"applied"`
	}
	raw, err := os.ReadFile(out + "/run.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &run); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, f := range run.Applied {
		kinds[f.Kind] = true
	}
	if !kinds["kill"] || !kinds["pause"] {
		t.Errorf("faults applied: %+v, want kill and pause", run.Applied)
	}
	for _, f := range []string{"report.txt", "report.json", "report.html", "timeline.html", "history.jsonl", "fenced.jsonl", "unfenced.jsonl"} {
		if st, err := os.Stat(out + "/" + f); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}

	e2 := newEnv(t)
	r = e2.run("chaos", "--backend", e2.url, "--negative-control", "--instances", "3", "--duration", "2s", "--faults", "", "--out", e2.path("run"))
	if r.code != ExitChaosFailed || !strings.Contains(r.stdout, "FAILURE") {
		t.Fatalf("negative control: exit %d, want %d with failures\nstdout:\n%s\nstderr:\n%s", r.code, ExitChaosFailed, r.stdout, r.stderr)
	}
}
