package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/childproc"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// lifeJob is a config job that appends "<job> <scheduled instant>" to the
// file effects, every `every`.
func lifeJob(name, every, effects string) string {
	return fmt.Sprintf(`  - name: %s
    schedule: "@every %s"
    lease_ttl: 2s
    command: {argv: [/bin/sh, -c, 'echo "$LEASEHOLD_JOB $LEASEHOLD_SCHEDULED_AT" >> %s']}
`, name, every, effects)
}

// writeLifeConfig writes the config file conf: namespace ns, HTTP off, the
// jobs given (lifeJob texts).
func writeLifeConfig(t *testing.T, e *env, conf, ns string, jobs ...string) {
	t.Helper()
	data := fmt.Sprintf("backend: %s\nnamespace: %s\ngrace: 2s\nhttp: {listen: \"off\"}\njobs:\n%s", e.url, ns, strings.Join(jobs, ""))
	if err := os.WriteFile(conf+".new", []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(conf+".new", conf); err != nil { // the daemon never reads half a file
		t.Fatal(err)
	}
}

// logOnFailure logs p's stderr if the test fails.
func logOnFailure(t *testing.T, name string, p *proc) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, p.stderr.String())
		}
	})
}

// logHas reports whether the daemon's text log holds want, whose quotes
// the log escapes.
func logHas(log, want string) bool {
	return strings.Contains(log, strings.ReplaceAll(want, `"`, `\"`))
}

// effect is one line the jobs wrote.
type effect struct {
	job string
	at  time.Time
}

func readEffects(t *testing.T, path string) []effect {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []effect
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, f[1])
		if err != nil {
			t.Fatalf("effect line %q: %v", line, err)
		}
		out = append(out, effect{f[0], at})
	}
	return out
}

// runsAfter counts job's effects scheduled after t.
func runsAfter(t *testing.T, path, job string, after time.Time) int {
	n := 0
	for _, f := range readEffects(t, path) {
		if f.job == job && f.at.After(after) {
			n++
		}
	}
	return n
}

// SIGHUP reloads the config: a changed job runs on its new schedule only
// (the old timer is gone), a removed job stops, an added job starts. A
// config that is invalid, or changes what cannot change live (the
// namespace), is refused with the reason logged, and the running config
// goes on.
func TestSIGHUPReloadsTheConfig(t *testing.T) {
	e := newEnv(t)
	conf, effects := e.path("life.yaml"), e.path("effects.log")
	writeLifeConfig(t, e, conf, "life", lifeJob("a", "300ms", effects), lifeJob("b", "300ms", effects))
	p := e.start("run", "--config", conf, "--http", "off")
	logOnFailure(t, "daemon", p)
	start := time.Now()
	eventually.True(t, 20*time.Second, "a and b run", func() bool {
		return runsAfter(t, effects, "a", start) >= 2 && runsAfter(t, effects, "b", start) >= 2
	})

	writeLifeConfig(t, e, conf, "life", lifeJob("a", "500ms", effects), lifeJob("c", "300ms", effects))
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	eventually.True(t, 20*time.Second, "the reload", func() bool { return strings.Contains(p.stderr.String(), "config reloaded") })
	reloaded := time.Now() // after the reload returned: every later instant is the new config's
	eventually.True(t, 20*time.Second, "c runs and a runs on its new schedule", func() bool {
		return runsAfter(t, effects, "c", reloaded) >= 3 && runsAfter(t, effects, "a", reloaded) >= 2
	})
	seen := map[string]bool{}
	for _, f := range readEffects(t, effects) {
		k := f.job + " " + f.at.Format(time.RFC3339Nano)
		if seen[k] {
			t.Fatalf("occurrence %s ran twice", k)
		}
		seen[k] = true
		if !f.at.After(reloaded) {
			continue
		}
		switch {
		case f.job == "b":
			t.Fatalf("removed job b ran the occurrence %v after the reload", f.at)
		case f.job == "a" && f.at.UnixMilli()%500 != 0:
			t.Fatalf("job a ran %v after the reload: an instant of its old schedule (@every 300ms) — the old timer is still running", f.at)
		}
	}

	// A config with an error: refused, logged with the field and value.
	_ = os.WriteFile(conf, []byte(fmt.Sprintf("backend: %s\nnamespace: life\nhttp: {listen: \"off\"}\njobs:\n  - name: c\n    schedule: \"99 * * * *\"\n    command: {argv: [x]}\n", e.url)), 0o644)
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	eventually.True(t, 20*time.Second, "the bad config refused", func() bool {
		s := p.stderr.String()
		return strings.Contains(s, "config not reloaded") && logHas(s, `jobs[0].schedule: job "c": leasehold/schedule: invalid schedule: schedule "99 * * * *"`)
	})
	// A namespace change cannot be applied live: refused.
	writeLifeConfig(t, e, conf, "elsewhere", lifeJob("c", "300ms", effects))
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	eventually.True(t, 20*time.Second, "the namespace change refused", func() bool {
		s := p.stderr.String()
		return strings.Contains(s, "config not reloaded") && logHas(s, `namespace "life" → "elsewhere"`)
	})
	refused := time.Now()
	eventually.True(t, 20*time.Second, "the running config goes on (a and c run)", func() bool {
		return runsAfter(t, effects, "c", refused) >= 2 && runsAfter(t, effects, "a", refused) >= 1
	})
	select {
	case <-p.done:
		t.Fatalf("the daemon exited: %v\n%s", p.err, p.stderr.String())
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, p.stderr.String())
	}
}

// instanceLeaseHeld reports whether the instance lease of id is held in
// namespace ns, as "leasehold locks" sees it.
func instanceLeaseHeld(t *testing.T, e *env, ns, id string) bool {
	r := e.expect(0, "locks", "--namespace", ns, "--json")
	var rows []lockInfo
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("locks --json: %v: %s", err, r.stdout)
	}
	for _, l := range rows {
		if l.Key == "instances/"+id {
			return true
		}
	}
	return false
}

// A daemon paused (SIGSTOP) past its instance lease's TTL loses the lease;
// on SIGCONT it re-acquires it and runs jobs again instead of exiting. This
// test pauses for the default TTL (15 s) or more.
func TestPausePastTheInstanceTTLRejoins(t *testing.T) {
	e := newEnv(t)
	conf, effects := e.path("life.yaml"), e.path("effects.log")
	writeLifeConfig(t, e, conf, "life", lifeJob("a", "300ms", effects))
	p := e.start("run", "--config", conf, "--instance", "pausy", "--http", "off")
	logOnFailure(t, "daemon", p)
	start := time.Now()
	eventually.True(t, 20*time.Second, "a runs", func() bool { return runsAfter(t, effects, "a", start) >= 1 })
	if !instanceLeaseHeld(t, e, "life", "pausy") {
		t.Fatal("the running daemon does not hold its instance lease")
	}
	// SQLite runs in the daemon's process: nothing it sent can be applied
	// after SIGSTOP, so its lease expires, by the host's clock, at most the
	// TTL after the signal. (The CLI cannot watch it expire: the paused
	// daemon may hold SQLite's write lock.)
	stopped := time.Now()
	if err := p.cmd.Process.Signal(childproc.SigStop); err != nil {
		t.Fatal(err)
	}
	expired := stopped.Add(leasehold.DefaultTTL + time.Second)
	eventually.True(t, leasehold.DefaultTTL+10*time.Second, "the paused daemon's instance lease to expire", func() bool { return time.Now().After(expired) })
	_ = p.cmd.Process.Signal(childproc.SigCont)
	resumed := time.Now()
	eventually.True(t, 30*time.Second, "the lease loss noticed, the instance id held again and a running again", func() bool {
		s := p.stderr.String()
		return strings.Contains(s, "instance id lease lost") && strings.Contains(s, "instance id held again") && runsAfter(t, effects, "a", resumed) >= 2
	})
	if !instanceLeaseHeld(t, e, "life", "pausy") {
		t.Fatal("running again without the instance lease")
	}
	select {
	case <-p.done:
		t.Fatalf("the daemon exited: %v\n%s", p.err, p.stderr.String())
	default:
	}
}

// A daemon killed with SIGKILL leaves its instance lease behind; a restart
// on the same host (same boot) whose predecessor's pid is gone takes the id
// over at once instead of refusing or waiting out the TTL.
func TestRestartAfterKill9TakesOverAtOnce(t *testing.T) {
	e := newEnv(t)
	conf, effects := e.path("life.yaml"), e.path("effects.log")
	writeLifeConfig(t, e, conf, "life", lifeJob("a", "300ms", effects))
	first := e.start("run", "--config", conf, "--instance", "phoenix", "--http", "off")
	eventually.True(t, 20*time.Second, "the first daemon runs", func() bool { return strings.Contains(first.stderr.String(), "leasehold daemon running") })
	_ = first.cmd.Process.Kill()
	<-first.done
	if !instanceLeaseHeld(t, e, "life", "phoenix") {
		t.Fatal("the killed daemon's lease is not held: the test would not show a takeover")
	}
	second := e.start("run", "--config", conf, "--instance", "phoenix", "--http", "off")
	logOnFailure(t, "restarted", second)
	eventually.True(t, 20*time.Second, "the restarted daemon runs", func() bool { return strings.Contains(second.stderr.String(), "leasehold daemon running") })
	if s := second.stderr.String(); !strings.Contains(s, "taking the instance id over") {
		t.Fatalf("the restarted daemon did not take the id over (it waited for the lease to expire?):\n%s", s)
	}
	started := time.Now()
	eventually.True(t, 20*time.Second, "a runs under the restarted daemon", func() bool { return runsAfter(t, effects, "a", started) >= 1 })
}

// A second daemon with the id of one that is alive waits, saying why, and
// runs nothing; it takes over once the first stops.
func TestSecondDaemonWithTheSameInstanceWaits(t *testing.T) {
	e := newEnv(t)
	conf, effects := e.path("life.yaml"), e.path("effects.log")
	writeLifeConfig(t, e, conf, "life", lifeJob("a", "300ms", effects))
	first := e.start("run", "--config", conf, "--instance", "same", "--http", "off")
	eventually.True(t, 20*time.Second, "the first daemon runs", func() bool { return strings.Contains(first.stderr.String(), "leasehold daemon running") })
	second := e.start("run", "--config", conf, "--instance", "same", "--http", "off")
	logOnFailure(t, "second", second)
	eventually.True(t, 20*time.Second, "the second daemon says why it waits", func() bool {
		return logHas(second.stderr.String(), `instance id already running: "same"`)
	})
	if s := second.stderr.String(); strings.Contains(s, "leasehold daemon running") {
		t.Fatalf("the second daemon runs beside the first:\n%s", s)
	}
	_ = first.cmd.Process.Signal(syscall.SIGTERM)
	if code := first.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("first daemon exit %d", code)
	}
	eventually.True(t, 30*time.Second, "the second daemon takes over", func() bool { return strings.Contains(second.stderr.String(), "leasehold daemon running") })
	started := time.Now()
	eventually.True(t, 20*time.Second, "a runs under the second daemon", func() bool { return runsAfter(t, effects, "a", started) >= 1 })
}
