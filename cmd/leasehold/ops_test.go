package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

// writeConfig writes a daemon config into dir (made if missing) and returns
// its path.
func writeConfig(t *testing.T, dir, text string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "leasehold.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReadCommandsTakeTheDaemonsConfig: runs, locks and jobs given the
// config a daemon runs read the database and namespace it writes (its
// default SQLite file next to the config, namespace ops), not the CLI's
// default; --namespace still overrides the config.
func TestReadCommandsTakeTheDaemonsConfig(t *testing.T) {
	e := newEnv(t)
	e.bare = true // no --backend: everything comes from --config or the default
	conf := writeConfig(t, e.path("etc"), `namespace: ops
grace: 2s
jobs:
  - name: tick
    schedule: "@every 300ms"
    lease_ttl: 2s
    command: {argv: [/bin/true]}
`)
	e.start("run", "--config", conf, "--instance", "d1", "--http", "off")
	var runs []runInfo
	eventually.True(t, 30*time.Second, "runs --config to list the daemon's runs", func() bool {
		r := e.run("runs", "--config", conf, "--json")
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &runs) == nil && len(runs) > 0
	})
	if runs[0].Job != "tick" || runs[0].Instance != "d1" {
		t.Errorf("runs --config: %+v, want runs of tick by d1", runs[0])
	}
	// Without --config: the CLI's default database, which the daemon
	// never wrote (the failure this replaces: an empty table, silently);
	// it does not exist, and a read command says so and creates none.
	if r := e.expect(70, "runs", "--json"); !strings.Contains(r.stderr, "no SQLite database at") {
		t.Errorf("runs without --config: %s", r.stderr)
	}
	// --namespace overrides the config's.
	if out := e.expect(0, "runs", "--config", conf, "--namespace", "default", "--json").stdout; strings.TrimSpace(out) != "[]" {
		t.Errorf("runs --config --namespace default: %s, want none (the daemon's namespace is ops)", out)
	}
	// --backend overrides the config's.
	e.expect(0, "--backend", "sqlite://"+e.path("other.db"), "lock", "k", "--", "true") // creates other.db
	if out := e.expect(0, "runs", "--config", conf, "--backend", "sqlite://"+e.path("other.db"), "--json").stdout; strings.TrimSpace(out) != "[]" {
		t.Errorf("runs --config --backend other.db: %s, want none", out)
	}

	var locks []lockInfo
	if err := json.Unmarshal([]byte(e.expect(0, "locks", "--config", conf, "--json").stdout), &locks); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range locks {
		found = found || l.Key == "instances/d1"
	}
	if !found {
		t.Errorf("locks --config: %+v, want the daemon's instance lock instances/d1", locks)
	}

	var jobs []jobInfo
	out := e.expect(0, "jobs", "--config", conf, "--json", "--next", "2").stdout
	if err := json.Unmarshal([]byte(out), &jobs); err != nil {
		t.Fatalf("jobs --json: %v: %s", err, out)
	}
	if len(jobs) != 1 {
		t.Fatalf("jobs --json: %s, want one job", out)
	}
	j := jobs[0]
	if j.Name != "tick" || j.Mode != string(schedule.Once) || j.Zone != "UTC" || j.Last == "" || len(j.Next) != 2 ||
		j.VersionState != "current" || j.CurrentVersion != j.Version || j.Paused {
		t.Errorf("jobs --json: %+v", j)
	}
	// Every field is present, even when empty.
	var raw []map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "schedule", "zone", "mode", "paused_at_start", "last_claimed", "next", "version", "version_state", "current_version", "switches_at"} {
		if _, ok := raw[0][k]; !ok {
			t.Errorf("jobs --json lacks %q: %s", k, out)
		}
	}
}

// TestActionsAgainstDaemon: trigger, pause, resume and resign reach a real
// daemon's admin API with the token it generated (found through --config)
// or one given with --token, and never print it.
func TestActionsAgainstDaemon(t *testing.T) {
	e := newEnv(t)
	addr := freeAddr(t)
	conf := writeConfig(t, e.dir, `grace: 2s
http: {listen: "`+addr+`"}
jobs:
  - name: tick
    schedule: "@yearly"
    lease_ttl: 2s
    command: {argv: [/bin/true]}
  - name: lead
    schedule: "@yearly"
    mode: leader
    command: {argv: [/bin/true]}
`)
	p := e.start("run", "--config", conf, "--instance", "a1")
	tokenFile := e.path("leasehold.db.admin-token")
	var token string
	eventually.True(t, 30*time.Second, "the daemon to generate its admin token and lead", func() bool {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return false
		}
		token = strings.TrimSpace(string(b))
		var st admin.Status
		r := e.run("status", "--config", conf, "--json")
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &st) == nil && len(st.Leaders) == 1
	})
	noToken := func(r result) result {
		t.Helper()
		if token != "" && (strings.Contains(r.stdout, token) || strings.Contains(r.stderr, token)) {
			t.Fatalf("the admin token was printed:\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
		}
		return r
	}

	r := noToken(e.expect(0, "trigger", "tick", "--key", "k1", "--config", conf))
	if !strings.Contains(r.stdout, "triggered job tick: key k1") {
		t.Errorf("trigger: %s", r.stdout)
	}
	eventually.True(t, 30*time.Second, "the triggered run in the history", func() bool {
		var rows []runInfo
		r := e.run("runs", "--config", conf, "--job", "tick", "--json")
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &rows) == nil && len(rows) == 1 && rows[0].Trigger == "k1" && rows[0].State == "succeeded"
	})
	// A key runs once: the second use is refused.
	r = noToken(e.expect(ExitNotAcquired, "trigger", "tick", "--key", "k1", "--config", conf))
	if !strings.Contains(r.stderr, "409") || !strings.Contains(r.stderr, `"k1"`) {
		t.Errorf("trigger with a used key: %s", r.stderr)
	}

	// Pause, then a trigger is refused; resume, then it runs.
	if r := noToken(e.expect(0, "pause", "tick", "--config", conf)); !strings.Contains(r.stdout, "paused job tick") {
		t.Errorf("pause: %s", r.stdout)
	}
	var st admin.Status
	if err := json.Unmarshal([]byte(e.expect(0, "status", "--config", conf, "--json").stdout), &st); err != nil {
		t.Fatal(err)
	}
	for _, j := range st.Jobs {
		if j.Name == "tick" && !j.Paused {
			t.Errorf("after pause, status says tick is not paused: %+v", j)
		}
	}
	r = noToken(e.expect(ExitNotAcquired, "trigger", "tick", "--key", "k2", "--config", conf))
	if !strings.Contains(r.stderr, "paused") {
		t.Errorf("trigger of a paused job: %s", r.stderr)
	}
	if r := noToken(e.expect(0, "resume", "tick", "--config", conf)); !strings.Contains(r.stdout, "resumed job tick") {
		t.Errorf("resume: %s", r.stdout)
	}
	// With --api and --token instead of --config; --json prints the answer.
	r = noToken(e.expect(0, "trigger", "tick", "--key", "k2", "--api", "http://"+addr, "--token", token, "--json"))
	var answer struct{ Job, Key string }
	if err := json.Unmarshal([]byte(r.stdout), &answer); err != nil || answer.Job != "tick" || answer.Key != "k2" {
		t.Errorf("trigger --json: %v: %s", err, r.stdout)
	}

	// Unknown job: exit 64, the daemon's message.
	r = noToken(e.expect(ExitUsage, "trigger", "nosuch", "--config", conf))
	if !strings.Contains(r.stderr, `no job "nosuch"`) {
		t.Errorf("trigger of an unknown job: %s", r.stderr)
	}
	// A role with a "/" is one path segment: the daemon reads it whole
	// (it names it in its answer) without the user escaping it.
	r = noToken(e.expect(ExitUsage, "resign", "queue/consumer", "--config", conf))
	if !strings.Contains(r.stderr, `role "queue/consumer"`) {
		t.Errorf("resign queue/consumer: %s", r.stderr)
	}
	r = noToken(e.expect(0, "resign", schedule.LeaderRole, "--config", conf))
	if !strings.Contains(r.stdout, "instance a1 resigned role "+schedule.LeaderRole) {
		t.Errorf("resign: %s", r.stdout)
	}
	// A wrong token: refused by the API, exit 70, not printed.
	const wrong = "wrong-token-0123456789abcdef"
	r = e.expect(ExitInternal, "pause", "tick", "--api", "http://"+addr, "--token", wrong)
	if !strings.Contains(r.stderr, "401") || strings.Contains(r.stderr, wrong) {
		t.Errorf("pause with a wrong token: %s", r.stderr)
	}
	if strings.Contains(p.stderr.String(), token) {
		t.Errorf("the daemon logged its admin token")
	}
}

// TestPausedAtStartRunsNothingUntilResumed: a job with paused: true is
// paused from the daemon's start (the state status and the API report);
// its occurrences pass unclaimed until "leasehold resume".
func TestPausedAtStartRunsNothingUntilResumed(t *testing.T) {
	e := newEnv(t)
	addr := freeAddr(t)
	conf := writeConfig(t, e.dir, `grace: 2s
http: {listen: "`+addr+`"}
jobs:
  - name: tick
    schedule: "@every 200ms"
    lease_ttl: 2s
    paused: true
    command: {argv: [/bin/true]}
`)
	p := e.start("run", "--config", conf, "--instance", "p1", "--log-level", "debug", "--log-format", "json")
	// Three occurrences pass unclaimed (the daemon logs each).
	eventually.True(t, 30*time.Second, "three occurrences skipped as paused", func() bool {
		return strings.Count(p.stderr.String(), "occurrence not claimed: the job is paused") >= 3
	})
	if out := e.expect(0, "runs", "--config", conf, "--json").stdout; strings.TrimSpace(out) != "[]" {
		t.Fatalf("a job paused at start ran: %s", out)
	}
	var st admin.Status
	if err := json.Unmarshal([]byte(e.expect(0, "status", "--config", conf, "--json").stdout), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Jobs) != 1 || !st.Jobs[0].Paused {
		t.Fatalf("status of a job paused at start: %+v", st.Jobs)
	}
	e.expect(0, "resume", "tick", "--config", conf)
	eventually.True(t, 30*time.Second, "runs after resume", func() bool {
		var rows []runInfo
		r := e.run("runs", "--config", conf, "--json")
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &rows) == nil && len(rows) > 0
	})
}

// TestRedisDialFailureIsOneMessage: a Redis server that cannot be reached
// gives leasehold's one message; go-redis's own logger (which printed
// "failed to dial" once per attempt before it) is silenced.
func TestRedisDialFailureIsOneMessage(t *testing.T) {
	e := newEnv(t)
	r := e.expect(ExitInternal, "--backend", "redis://"+freeAddr(t)+"/?dial_timeout=1s", "locks")
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "leasehold: redis at ") || strings.Contains(r.stderr, "failed to dial") {
		t.Fatalf("stderr of an unreachable Redis, want one leasehold line:\n%s", r.stderr)
	}
}

// TestActionsUseTheConfigsToken: given --config, the CLI sends a token of
// the config's http.tokens (here through token_env, as the daemon reads
// it) with the scope the command needs, and prints it nowhere.
func TestActionsUseTheConfigsToken(t *testing.T) {
	e := newEnv(t)
	const secret = "config-admin-token-0123456789abcdef"
	t.Setenv("LH_TEST_OPS_ADMIN", secret) // the daemon and the CLI read it
	t.Setenv(EnvAPIToken, "")
	addr := freeAddr(t)
	conf := writeConfig(t, e.dir, `grace: 2s
http:
  listen: "`+addr+`"
  tokens: [{scope: admin, token_env: LH_TEST_OPS_ADMIN}]
jobs:
  - name: tick
    schedule: "@yearly"
    command: {argv: [/bin/true]}
`)
	e.start("run", "--config", conf, "--instance", "c1")
	eventually.True(t, 30*time.Second, "the daemon's API", func() bool { return e.run("status", "--config", conf).code == 0 })
	for _, args := range [][]string{{"pause", "tick"}, {"resume", "tick"}, {"trigger", "tick", "--key", "c1"}} {
		r := e.expect(0, append(args, "--config", conf)...)
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Fatalf("%v printed the token: %s%s", args, r.stdout, r.stderr)
		}
	}
	if _, err := os.Stat(e.path("leasehold.db.admin-token")); err == nil {
		t.Errorf("a daemon with configured tokens generated one")
	}
}
