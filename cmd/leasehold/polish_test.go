package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionFlag: "leasehold --version" prints what "leasehold version"
// does.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	flag, cmd := e.expect(0, "--version"), e.expect(0, "version")
	if flag.stdout != cmd.stdout || !strings.HasPrefix(flag.stdout, "leasehold github.com/leasehold/leasehold ") {
		t.Fatalf("--version printed %q, version %q", flag.stdout, cmd.stdout)
	}
}

// TestUsageHintOnlyForTheCommandLine: a command line cobra refuses gets
// the hint to the command's help; a command that ran and failed (a bad
// value, a daemon's 404) does not get "run leasehold help", which helps
// no one there.
func TestUsageHintOnlyForTheCommandLine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if r := e.expect(64, "locks", "--bogus"); !strings.Contains(r.stderr, `run "leasehold locks --help" for usage`) {
		t.Errorf("an unknown flag gets no hint to the command's help:\n%s", r.stderr)
	}
	if r := e.expect(64, "doctor", "--rounds", "0"); strings.Contains(r.stderr, "for usage") {
		t.Errorf("a bad value got a usage hint:\n%s", r.stderr)
	}
}

// TestReadCommandsCreateNothing: locks, runs, jobs and doctor on a SQLite path
// that does not exist (a typo, a host:port meant as a server) fail and
// leave no file behind: they used to create an empty database, exit 0 and
// show nothing, as if all were well.
func TestReadCommandsCreateNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, url := range []string{e.path("missing.db"), "sqlite://" + e.path("missing2.db")} {
		for _, args := range [][]string{{"locks"}, {"runs"}, {"doctor"}} {
			r := e.expect(70, append([]string{"--backend", url}, args...)...)
			if !strings.Contains(r.stderr, "no SQLite database at") || !strings.Contains(r.stderr, "read commands create none") {
				t.Errorf("%s --backend %s: %s", args[0], url, r.stderr)
			}
		}
	}
	// A host:port is refused as the lock command and the daemon refuse it
	// (bad usage, naming the schemes), not looked for as a SQLite file.
	for _, args := range [][]string{{"locks"}, {"runs"}, {"doctor"}} {
		r := e.expect(64, append([]string{"--backend", "127.0.0.1:6379"}, args...)...)
		if !strings.Contains(r.stderr, "looks like host:port") || !strings.Contains(r.stderr, "redis://127.0.0.1:6379") {
			t.Errorf("%s --backend 127.0.0.1:6379: %s", args[0], r.stderr)
		}
	}
	// jobs reads the config's backend: before any daemon made the file it
	// shows the jobs with nothing claimed, and makes no file.
	conf := e.path("jobs.yaml")
	if err := os.WriteFile(conf, []byte("backend: "+e.path("missing3.db")+"\njobs:\n  - name: tick\n    schedule: \"@every 1s\"\n    command: {argv: [\"true\"]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := e.expect(0, "jobs", "--config", conf); !strings.Contains(r.stderr, "no SQLite database at") || !strings.Contains(r.stdout, "tick") {
		t.Errorf("jobs --config before the daemon made its database:\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
	}
	for _, name := range []string{"missing.db", "missing2.db", "missing3.db"} {
		if _, err := os.Stat(e.path(name)); !os.IsNotExist(err) {
			t.Errorf("a read command created %s (%v)", name, err)
		}
	}
	// The default database, when nothing has made it, is not made either.
	e.bare = true
	e.expect(70, "locks")
	if m, _ := filepath.Glob(filepath.Join(e.path("state"), "leasehold", "*.db*")); len(m) > 0 {
		t.Errorf("locks created the default database: %v", m)
	}
}

// TestDoctorJSON: "leasehold doctor --json" is the report as JSON, with
// each capability and the warnings (none for a SQLite file with
// synchronous FULL).
func TestDoctorJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.expect(0, "lock", "k", "--", "true")
	r := e.expect(0, "doctor", "--json")
	var got struct {
		Name         string `json:"name"`
		Rounds       int    `json:"rounds"`
		ClockKnown   bool   `json:"clock_known"`
		Capabilities []struct {
			Capability, Value string
		} `json:"capabilities"`
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, r.stdout)
	}
	caps := map[string]string{}
	for _, c := range got.Capabilities {
		caps[c.Capability] = c.Value
	}
	if got.Name != "sqlite" || got.Rounds != 5 || !got.ClockKnown || caps["HostsShared"] != "no" || caps["Ledger"] != "yes" || got.Warnings == nil {
		t.Fatalf("doctor --json: %+v", got)
	}
}

// TestCompleteJobNames: trigger, pause and resume complete their JOB
// argument in shells from --config's jobs.
func TestCompleteJobNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	conf := e.path("c.yaml")
	if err := os.WriteFile(conf, []byte("backend: "+e.url+"\njobs:\n  - name: report\n    schedule: \"@daily\"\n    command: {argv: [/bin/true]}\n"+
		"  - name: reindex\n    schedule: \"@daily\"\n    command: {argv: [/bin/true]}\n  - name: backup\n    schedule: \"@daily\"\n    command: {argv: [/bin/true]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"trigger", "pause", "resume"} {
		r := e.expect(0, "__complete", verb, "--config", conf, "re")
		got := strings.Fields(r.stdout)
		if len(got) < 3 || got[0] != "report" || got[1] != "reindex" || got[2] != ":4" {
			t.Errorf("completing %s re: %q", verb, r.stdout)
		}
	}
}

// TestHolderDisplay: "leasehold locks" shows a daemon's instance lock's
// holder as the admin API and "leasehold status" do — the instance name,
// its process apart — and a user lock's holder as given.
func TestHolderDisplay(t *testing.T) {
	for _, c := range []struct{ key, owner, instance, process string }{
		{"instances/web-1", "web-1@host:42:1234:boot", "web-1", "host:42:1234:boot"},
		{"deploy", "ci@runner-7", "ci@runner-7", ""},
		{"instances/old", "old", "old", ""},
	} {
		if i, p := holder(c.key, c.owner); i != c.instance || p != c.process {
			t.Errorf("holder(%q, %q) = %q, %q; want %q, %q", c.key, c.owner, i, p, c.instance, c.process)
		}
	}
}

// TestReadCommandsCreateNoTables: a SQLite file that is not leasehold's
// (another program's database, an empty file) is not given leasehold's
// tables by a read command.
func TestReadCommandsCreateNoTables(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	other := e.path("other.db")
	if err := os.WriteFile(other, nil, 0o600); err != nil { // an empty file is an empty SQLite database
		t.Fatal(err)
	}
	for _, cmd := range []string{"locks", "runs", "doctor"} {
		if r := e.expect(70, "--backend", other, cmd); !strings.Contains(r.stderr, "without leasehold's tables") {
			t.Errorf("%s on another database: %s", cmd, r.stderr)
		}
	}
	if fi, err := os.Stat(other); err != nil || fi.Size() != 0 {
		t.Errorf("a read command wrote to the other database: %v %v", fi, err)
	}
	// leasehold's own database (made by a lock) reads as before.
	e.expect(0, "lock", "k", "--", "true")
	e.expect(0, "locks")
}
