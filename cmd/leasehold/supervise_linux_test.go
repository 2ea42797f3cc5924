package main

// End-to-end tests of issue 24: nothing a command job or "leasehold lock"
// started outlives its run, and the lease deadline is enforced even while
// leasehold is paused or dead. Real daemons and locks (the binary built by
// TestMain) on a SQLite file; the work is this test binary's "work" helper,
// which timestamps its lines with CLOCK_BOOTTIME, the clock the SQLite
// backend judges leases by. Each test runs in both kill modes (a cgroup v2
// leaf where the host allows one, and the process-group fallback).

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/leasehold/leasehold/internal/supervisor"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// killModes runs f once per kill mode, with the mode in the environment of
// every leasehold the test starts.
func killModes(t *testing.T, f func(t *testing.T, e *env)) {
	for _, m := range []string{"auto", supervisor.ModeGroup} {
		t.Run(m, func(t *testing.T) {
			e := newEnv(t)
			if m == supervisor.ModeGroup {
				t.Setenv(supervisor.ModeEnv, supervisor.ModeGroup)
			} else {
				t.Setenv(supervisor.ModeEnv, "")
			}
			f(t, e)
		})
	}
}

// workEnv is the environment that makes this test binary the work helper.
func workEnv(e *env, secs string, ignoreTerm bool) map[string]string {
	exe, _ := filepath.Abs(os.Args[0])
	m := map[string]string{helperEnv: "work", "LEASEHOLD_TEST_LOG": e.path("work.log"), "LEASEHOLD_TEST_WORK": secs, "W": exe}
	if ignoreTerm {
		m["LEASEHOLD_TEST_IGNORE_TERM"] = "1"
	}
	return m
}

// workDaemonConfig writes a daemon config with one command job "w" running
// script (sh -c; "$W" is the work helper), every second, max_concurrent 1,
// a 3 s lease, and extra job settings.
func workDaemonConfig(e *env, script string, workEnv map[string]string, extra string) string {
	envJSON, _ := json.Marshal(workEnv)
	scriptJSON, _ := json.Marshal(script)
	conf := e.path("leasehold.yaml")
	data := fmt.Sprintf(`backend: %s
grace: 5s
jobs:
  - name: w
    schedule: "@every 1s"
    lease_ttl: 3s
    max_concurrent: 1
%s    command:
      argv: [sh, -c, %s]
      env: %s
`, e.url, extra, scriptJSON, envJSON)
	if err := os.WriteFile(conf, []byte(data), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return conf
}

// tokens returns the distinct tokens of the work lines.
func tokens(ls []workLine) map[uint64]bool {
	out := map[uint64]bool{}
	for _, l := range ls {
		out[l.token] = true
	}
	return out
}

// noneAlive fails if a pid of the work lines still runs.
func noneAlive(t *testing.T, ls []workLine) {
	t.Helper()
	for _, l := range ls {
		if alive(l.pid) {
			t.Fatalf("work process %d (token %d) still runs after its run ended", l.pid, l.token)
		}
	}
}

// stopDaemon stops a daemon with SIGTERM and waits for it.
func stopDaemon(t *testing.T, p *proc) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t, 30*time.Second)
}

// TestTimedOutJobUnderShellWrapper (issue 24, 1): a job that times out
// under a shell wrapper whose work ignores SIGTERM: the work is SIGKILLed
// at the grace's end, before the run is recorded and its lease released,
// so no two occurrences' work ever runs at the same time.
func TestTimedOutJobUnderShellWrapper(t *testing.T) {
	killModes(t, func(t *testing.T, e *env) {
		conf := workDaemonConfig(e, `(trap '' TERM; exec "$W" >/dev/null 2>&1); true`, workEnv(e, "10", true), "    timeout: 1s\n")
		d := e.start("run", "--config", conf, "--instance", "a")
		log := e.path("work.log")
		eventually.True(t, 60*time.Second, "three occurrences' work", func() bool { return len(tokens(readWork(log))) >= 3 })
		stopDaemon(t, d)
		ls := readWork(log)
		if o := overlaps(ls); o != "" {
			t.Fatalf("work of different occurrences ran at the same time: %s", o)
		}
		noneAlive(t, ls)
	})
}

// TestSigkilledDaemonKillsJobTree (issue 24, 2): a daemon SIGKILLed mid-run
// takes the job's whole tree with it at once — the work under "sh -c" too,
// which Pdeathsig alone does not reach — so the retry another daemon runs
// never runs beside it.
func TestSigkilledDaemonKillsJobTree(t *testing.T) {
	killModes(t, func(t *testing.T, e *env) {
		conf := workDaemonConfig(e, `"$W"; true`, workEnv(e, "15", false), "")
		log := e.path("work.log")
		a := e.start("run", "--config", conf, "--instance", "a")
		eventually.True(t, 60*time.Second, "the first run's work", func() bool { return len(readWork(log)) >= 3 })
		_ = a.cmd.Process.Kill()
		a.wait(t, 30*time.Second)
		b := e.start("run", "--config", conf, "--instance", "b")
		eventually.True(t, 60*time.Second, "work of a run of daemon b", func() bool {
			for _, l := range readWork(log) {
				if l.instance == "b" {
					return true
				}
			}
			return false
		})
		stopDaemon(t, b)
		ls := readWork(log)
		if o := overlaps(ls); o != "" {
			t.Fatalf("work of different runs ran at the same time: %s", o)
		}
		noneAlive(t, ls)
	})
}

// TestLeftoverOfExitedCommandKilled (issue 24, 3): a command that exits
// leaving its work running in the background: the leftover is killed
// before the run ends (and the run's output says so), so later
// occurrences never run beside it, and nothing outlives the daemon's
// SIGTERM.
func TestLeftoverOfExitedCommandKilled(t *testing.T) {
	killModes(t, func(t *testing.T, e *env) {
		// The leftover writes its first line before the command exits, so
		// that each run has a line to judge.
		conf := workDaemonConfig(e, `"$W" >/dev/null 2>&1 & until grep -q "^W $LEASEHOLD_TOKEN " "$LEASEHOLD_TEST_LOG" 2>/dev/null; do sleep 0.01; done; exit 0`,
			workEnv(e, "12", false), "")
		d := e.start("run", "--config", conf, "--instance", "a")
		log := e.path("work.log")
		eventually.True(t, 60*time.Second, "three occurrences' work", func() bool { return len(tokens(readWork(log))) >= 3 })
		stopDaemon(t, d)
		ls := readWork(log)
		if o := overlaps(ls); o != "" {
			t.Fatalf("leftover work ran beside a later occurrence: %s", o)
		}
		noneAlive(t, ls)
		r := e.expect(0, "runs", "--config", conf, "--json")
		var rows []runInfo
		if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) == 0 {
			t.Fatalf("runs --json: %v: %s", err, r.stdout)
		}
		for _, row := range rows {
			if row.State == "succeeded" && !strings.Contains(row.Result, "they were killed") {
				t.Fatalf("run %+v: its output does not say that its leftovers were killed", row)
			}
		}
	})
}

// leaseDB opens the SQLite file of e read-only.
func leaseDB(t *testing.T, e *env) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+e.path("leasehold.db")+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestPausedDaemonJobKilledBeforeNextGrant (issue 24, 4): the daemon is
// SIGSTOPped while its command runs past the 3 s lease: the supervisor
// kills the command at the lease deadline, before the backend lets another
// daemon claim the next occurrence. Judged on the backend's clock: the
// last line of the paused run's work comes before its lease's expiry as
// the backend recorded it, which no later claim of the job (max_concurrent
// 1) can precede.
func TestPausedDaemonJobKilledBeforeNextGrant(t *testing.T) {
	killModes(t, func(t *testing.T, e *env) {
		conf := workDaemonConfig(e, `"$W"; true`, workEnv(e, "30", false), "    crash: skip\n")
		log := e.path("work.log")
		a := e.start("run", "--config", conf, "--instance", "a")
		eventually.True(t, 60*time.Second, "the first run's work", func() bool { return len(readWork(log)) >= 3 })
		first := readWork(log)[0].token
		b := e.start("run", "--config", conf, "--instance", "b")
		if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) }()
		eventually.True(t, 60*time.Second, "work of a later run on daemon b", func() bool {
			for _, l := range readWork(log) {
				if l.token != first {
					return true
				}
			}
			return false
		})
		var expires int64
		if err := leaseDB(t, e).QueryRow(`SELECT expires_ns FROM runs WHERE job = 'w' AND token = ?`, first).Scan(&expires); err != nil {
			t.Fatal(err)
		}
		stopDaemon(t, b)
		ls := readWork(log)
		all := spans(ls)
		sp := all[first]
		t.Logf("token %d: work [%d, %d], lease expired at %d (backend clock)", first, sp.first, sp.last, expires)
		for tok, o := range all {
			// The judge itself: no later claim precedes the expiry.
			if tok != first && o.first < expires {
				t.Fatalf("token %d's work started at %d, before token %d's lease expired at %d: the expiry read is not the one the backend judged by", tok, o.first, first, expires)
			}
		}
		if sp.last >= expires {
			t.Fatalf("the paused daemon's work (token %d) wrote at %d, %v after its lease expired at %d (backend clock): a later claim could run beside it",
				first, sp.last, time.Duration(sp.last-expires), expires)
		}
		if o := overlaps(ls); o != "" {
			t.Fatalf("work of different runs ran at the same time: %s", o)
		}
		noneAlive(t, ls)
	})
}

// TestPausedLockCommandKilledBeforeNextGrant (issue 24, 4, "leasehold
// lock"): a SIGSTOPped "leasehold lock --ttl 3s" has its command killed
// before a second "leasehold lock" is granted the key: the command's last
// line comes before the second grant's time on the backend's clock.
func TestPausedLockCommandKilledBeforeNextGrant(t *testing.T) {
	killModes(t, func(t *testing.T, e *env) {
		log := e.path("work.log")
		for k, v := range workEnv(e, "30", false) {
			t.Setenv(k, v)
		}
		h1 := e.start("lock", "--ttl", "3s", "k", "--", os.Args[0])
		eventually.True(t, 60*time.Second, "the first holder's work", func() bool { return len(readWork(log)) >= 3 })
		if err := h1.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = h1.cmd.Process.Signal(syscall.SIGCONT) }()
		const ttl2 = 60 * time.Second // not renewed within the test: its row keeps the grant's time
		t.Setenv("LEASEHOLD_TEST_WORK", "1")
		h2 := e.start("lock", "--ttl", ttl2.String(), "k", "--", os.Args[0])
		eventually.True(t, 60*time.Second, "the second holder's work", func() bool { return tokens(readWork(log))[2] })
		var expires int64
		if err := leaseDB(t, e).QueryRow(`SELECT expires_ns FROM leases WHERE token = 2`).Scan(&expires); err != nil {
			t.Fatal(err)
		}
		grant := expires - int64(ttl2)
		h2.wait(t, 60*time.Second)
		ls := readWork(log)
		sp := spans(ls)[1]
		t.Logf("token 1: work [%d, %d]; token 2 granted at %d, its work from %d (backend clock)", sp.first, sp.last, grant, spans(ls)[2].first)
		if spans(ls)[2].first < grant {
			t.Fatalf("token 2's work started at %d, before its grant at %d: the grant read is wrong", spans(ls)[2].first, grant)
		}
		if sp.last >= grant {
			t.Fatalf("the paused holder's command (token 1) wrote at %d, %v after the second holder's grant at %d (backend clock)",
				sp.last, time.Duration(sp.last-grant), grant)
		}
		noneAlive(t, ls)
	})
}

// TestJobGetsNoInheritedDescriptor (issue 24, 5): a descriptor the daemon
// inherited without close-on-exec (a secret file on fd 7) does not reach a
// job, even one that drops its privileges to nobody.
func TestJobGetsNoInheritedDescriptor(t *testing.T) {
	killModes(t, func(t *testing.T, e *env) {
		secret := e.path("secret")
		if err := os.WriteFile(secret, []byte("TOPSECRET\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(secret)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		conf := e.path("leasehold.yaml")
		data := fmt.Sprintf(`backend: %s
jobs:
  - name: fd
    schedule: "@every 1s"
    command:
      argv: [setpriv, --reuid=65534, --regid=65534, --clear-groups, sh, -c, "cat <&7 2>/dev/null || echo fd 7 closed"]
`, e.url)
		if err := os.WriteFile(conf, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		d := e.command("run", "--config", conf, "--instance", "a")
		d.ExtraFiles = []*os.File{nil, nil, nil, nil, f} // fd 7, without close-on-exec
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = d.Process.Kill(); _ = d.Wait() }()
		var rows []runInfo
		eventually.True(t, 60*time.Second, "a finished run", func() bool {
			r := e.run("runs", "--config", conf, "--json")
			rows = nil
			_ = json.Unmarshal([]byte(r.stdout), &rows)
			for _, row := range rows {
				if row.State == "succeeded" || row.State == "failed" {
					return true
				}
			}
			return false
		})
		for _, row := range rows {
			if strings.Contains(row.Result, "TOPSECRET") {
				t.Fatalf("a job running as nobody read the daemon's inherited fd 7: %+v", row)
			}
			if (row.State == "succeeded" || row.State == "failed") && !strings.Contains(row.Result, "fd 7 closed") {
				t.Fatalf("run %+v: want the job to find fd 7 closed", row)
			}
		}
	})
}
