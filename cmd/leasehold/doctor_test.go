package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	bopen "github.com/leasehold/leasehold/backend/open"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestDoctorSQLite: the default SQLite file (synchronous FULL) gives every
// guarantee a one-host backend can, with the setting that decides
// durability, a round trip and a clock.
func TestDoctorSQLite(t *testing.T) {
	e := newEnv(t)
	e.expect(0, "lock", "k", "--", "true") // doctor creates no database
	r := e.expect(0, "doctor")
	for _, want := range []string{"(sqlite)", "median of 5 Gets", "clock:", "synchronous=2 (FULL or EXTRA)", "Ledger          yes", "no warnings", "kill mode:  "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = e.expect(0, "doctor", "--backend", e.url+"?synchronous=normal")
	if !regexp.MustCompile(`(?m)^  - DurableFencing no: synchronous=1 `).MatchString(r.stdout) {
		t.Errorf("synchronous=normal: no DurableFencing warning naming the setting:\n%s", r.stdout)
	}
}

// TestDoctorRedisAppendonly: a Redis server with appendonly no is warned
// about, with the reason (tokens go backwards after a restart); with
// appendonly yes and appendfsync always it is not. The server's clock is
// read (TIME).
func TestDoctorRedisAppendonly(t *testing.T) {
	e := newEnv(t)
	volatile := testserver.Redis(t)
	r := e.expect(0, "doctor", "--backend", "redis://"+volatile.Addr()+"/0")
	if !strings.Contains(r.stdout, "  - DurableFencing no: appendonly no: a restart of the server forgets the token counters, so tokens go backwards after a restart") {
		t.Errorf("appendonly no: no warning naming it:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "from this host's") {
		t.Errorf("no clock offset for Redis:\n%s", r.stdout)
	}
	durable := testserver.Redis(t, "--appendonly", "yes", "--appendfsync", "always")
	r = e.expect(0, "doctor", "--backend", "redis://"+durable.Addr()+"/0")
	if !strings.Contains(r.stdout, "DurableFencing  yes    appendonly yes, appendfsync always") || strings.Contains(r.stdout, "- DurableFencing") {
		t.Errorf("appendonly yes, appendfsync always: want DurableFencing yes and no warning:\n%s", r.stdout)
	}
}

// TestDoctorConfig: --config checks the backend the daemon's config names,
// read by the daemon's loader.
func TestDoctorConfig(t *testing.T) {
	e := newEnv(t)
	srv := testserver.Redis(t)
	conf := e.path("leasehold.yaml")
	data := fmt.Sprintf("backend: redis://%s/0\njobs:\n  - name: r\n    schedule: \"@every 1h\"\n    command: {argv: [/bin/true]}\n", srv.Addr())
	if err := os.WriteFile(conf, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := e.command()
	cmd.Args = []string{bin, "doctor", "--config", conf} // no --backend: the config's
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("doctor --config: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "redis://"+srv.Addr()+"/0 (redis)") {
		t.Errorf("doctor --config did not check the config's backend:\n%s", out)
	}
}

// TestDoctorUnreachable: a backend that does not answer is exit status 70,
// and the error names it.
func TestDoctorUnreachable(t *testing.T) {
	e := newEnv(t)
	srv := testserver.Redis(t)
	srv.Kill()
	r := e.expect(ExitInternal, "doctor", "--backend", "redis://:hunter2@"+srv.Addr()+"/0")
	if !strings.Contains(r.stderr, srv.Addr()) || strings.Contains(r.stderr+r.stdout, "hunter2") {
		t.Errorf("want an error naming %s without the password:\n%s", srv.Addr(), r.stderr)
	}
}

// TestHelpListsEveryScheme: "leasehold --help" shows every backend's URL
// form and "run --help" every scheme, from backend/open's table.
func TestHelpListsEveryScheme(t *testing.T) {
	e := newEnv(t)
	root := e.expect(0, "--help").stdout
	for _, d := range bopen.Backends() {
		if !strings.Contains(root, d.Form) {
			t.Errorf("leasehold --help lacks %s's form %q", d.Name, d.Form)
		}
	}
	run := e.expect(0, "run", "--help").stdout
	for _, s := range bopen.Schemes() {
		if !strings.Contains(run, s) {
			t.Errorf("leasehold run --help lacks the scheme %q", s)
		}
	}
	if !strings.Contains(run, strings.Join(bopen.Schemes(), ", ")) {
		t.Errorf("leasehold run --help does not list the schemes:\n%s", run)
	}
}
