//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/childproc"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

func TestLockPassesEnvAndExitCode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.expect(7, "--instance", "inst-1", "--namespace", "team/a", "lock", "jobs/k1", "--",
		"sh", "-c", `echo "$LEASEHOLD_TOKEN|$LEASEHOLD_KEY|$LEASEHOLD_NAMESPACE|$LEASEHOLD_INSTANCE"; exit 7`)
	f := strings.Split(strings.TrimSpace(r.stdout), "|")
	if len(f) != 4 {
		t.Fatalf("command printed %q", r.stdout)
	}
	parseToken(t, f[0])
	if f[1] != "jobs/k1" || f[2] != "team/a" || f[3] != "inst-1" {
		t.Errorf("command saw key %q, namespace %q, instance %q", f[1], f[2], f[3])
	}
	// Success, and a command killed by a signal: 128+N.
	e.expect(0, "lock", "k", "--", "true")
	e.expect(128+int(syscall.SIGTERM), "lock", "k", "--", "sh", "-c", "kill -TERM $$")
	// The lock was released each time: a non-blocking lock succeeds.
	e.expect(0, "lock", "--nonblock", "k", "--", "true")
	// CMD is run directly, without a shell.
	r = e.expect(0, "lock", "k", "--", "echo", "$HOME", "a;b")
	if got := strings.TrimSpace(r.stdout); got != "$HOME a;b" {
		t.Errorf("echo printed %q: the arguments went through a shell", got)
	}
	r = e.expect(ExitNotFound, "lock", "k", "--", "leasehold-no-such-command")
	if !strings.HasPrefix(r.stderr, "leasehold: ") || !strings.Contains(r.stderr, "leasehold-no-such-command") {
		t.Errorf("stderr %q", r.stderr)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := []struct {
		args []string
		want []string // in stderr
	}{
		{[]string{"lock", "k", "true"}, []string{"KEY -- CMD"}},
		{[]string{"lock", "k", "--"}, []string{"KEY -- CMD"}},
		{[]string{"lock", "--", "true"}, []string{"KEY -- CMD"}},
		{[]string{"lock", "--ttl", "abc", "k", "--", "true"}, []string{"--ttl", `"abc"`}},
		{[]string{"lock", "--ttl", "-1s", "k", "--", "true"}, []string{"--ttl", `"-1s"`}},
		{[]string{"lock", "--wait", "-1s", "k", "--", "true"}, []string{"--wait", `"-1s"`}},
		{[]string{"lock", "--kill-grace", "20s", "k", "--", "true"}, []string{"--kill-grace", `"20s"`}},
		{[]string{"lock", "--nonblock", "--wait", "1s", "k", "--", "true"}, []string{"--nonblock", "--wait"}},
		{[]string{"lock", "bad key", "--", "true"}, []string{`"bad key"`}},
		{[]string{"--namespace", "a//b", "locks"}, []string{"--namespace", `"a//b"`}},
		{[]string{"--backend", "consul://user:hunter2@host", "locks"}, []string{"--backend", `"consul"`, "sqlite"}},
		{[]string{"no-such-command"}, []string{"no-such-command"}},
		{[]string{"locks", "--no-such-flag"}, []string{"--no-such-flag"}},
	}
	for _, c := range cases {
		r := e.run(c.args...)
		if r.code != ExitUsage {
			t.Errorf("leasehold %q exited %d, want %d; stderr: %s", c.args, r.code, ExitUsage, r.stderr)
			continue
		}
		if !strings.HasPrefix(r.stderr, "leasehold: ") {
			t.Errorf("leasehold %q: stderr %q does not start with \"leasehold: \"", c.args, r.stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("leasehold %q: stderr %q does not contain %q", c.args, r.stderr, w)
			}
		}
		if strings.Contains(r.stderr, "hunter2") {
			t.Errorf("leasehold %q: stderr shows the password: %q", c.args, r.stderr)
		}
	}
	// --help documents the exit codes.
	r := e.expect(0, "lock", "--help")
	for _, w := range []string{"64", "70", "75", "76", "not acquired", "lease lost"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("lock --help does not mention %q", w)
		}
	}
}

func TestTokensIncrease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var last uint64
	for i := range 5 {
		r := e.expect(0, "lock", "k", "--", "sh", "-c", `echo "$LEASEHOLD_TOKEN"`)
		tok := parseToken(t, r.stdout)
		if tok <= last {
			t.Fatalf("lock %d got token %d after %d", i, tok, last)
		}
		last = tok
	}
}

// TestHeld holds a key with a command blocked on a fifo and checks what
// others see meanwhile.
func TestHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fifo, ready := e.path("fifo"), e.path("ready")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	holder := e.start("--instance", "holder-1", "lock", "shared/k", "--",
		"sh", "-c", holderScript(`read line < "$1"`), ready, fifo)
	token, _ := readReady(t, holder, ready)

	r := e.expect(ExitNotAcquired, "--instance", "other", "lock", "--nonblock", "shared/k", "--", "true")
	if !strings.Contains(r.stderr, "holder-1") {
		t.Errorf("--nonblock: stderr %q does not name the holder", r.stderr)
	}
	r = e.expect(ExitNotAcquired, "lock", "--wait", "200ms", "shared/k", "--", "true")
	if r.elapsed < 200*time.Millisecond {
		t.Errorf("--wait 200ms gave up after %v", r.elapsed)
	}
	if !strings.Contains(r.stderr, "--wait 200ms") {
		t.Errorf("--wait: stderr %q", r.stderr)
	}

	// locks --json shows the holder, with the token as a string.
	r = e.expect(0, "locks", "--json")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("locks --json: %v\n%s", err, r.stdout)
	}
	if len(rows) != 1 {
		t.Fatalf("locks --json: %d rows, want 1:\n%s", len(rows), r.stdout)
	}
	row := rows[0]
	if row["key"] != "shared/k" || row["instance"] != "holder-1" || row["token"] != strconv.FormatUint(token, 10) {
		t.Errorf("locks --json: %v, want key shared/k, instance holder-1, token %q", row, strconv.FormatUint(token, 10))
	}
	if ms, ok := row["remaining_ms"].(float64); !ok || ms <= 0 || ms > 15000 {
		t.Errorf("locks --json: remaining_ms %v", row["remaining_ms"])
	}
	r = e.expect(0, "locks")
	if !strings.Contains(r.stdout, "shared/k") || !strings.Contains(r.stdout, "holder-1") {
		t.Errorf("locks:\n%s", r.stdout)
	}
	// Another namespace does not see it.
	r = e.expect(0, "--namespace", "elsewhere", "locks", "--json")
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("locks in another namespace: %s", r.stdout)
	}

	// Let the holder's command finish: leasehold exits 0 and releases.
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("go\n")
	f.Close()
	if code := holder.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("holder exited %d; stderr: %s", code, holder.stderr.String())
	}
	e.expect(0, "lock", "--nonblock", "shared/k", "--", "true")
	r = e.expect(0, "locks", "--json")
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("locks after release: %s", r.stdout)
	}
}

// TestSignalForwarded: SIGTERM to leasehold reaches the command's process
// group, and the lock is released after it exits.
func TestSignalForwarded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ready := e.path("ready")
	holder := e.start("lock", "k", "--", "sh", "-c", holderScript("exec sleep 60"), ready)
	_, pid := readReady(t, holder, ready)
	if err := holder.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := holder.wait(t, 20*time.Second); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("leasehold exited %d, want %d; stderr: %s", code, 128+int(syscall.SIGTERM), holder.stderr.String())
	}
	if alive(pid) {
		t.Errorf("command %d still runs", pid)
	}
	e.expect(0, "lock", "--nonblock", "k", "--", "true")
}

// TestPdeathsig: when leasehold is killed with SIGKILL, the kernel kills its
// command.
func TestPdeathsig(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ready := e.path("ready")
	holder := e.start("lock", "k", "--", "sh", "-c", holderScript("exec sleep 60"), ready)
	_, pid := readReady(t, holder, ready)
	if !alive(pid) {
		t.Fatalf("command %d is not running", pid)
	}
	if err := holder.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	holder.wait(t, 20*time.Second)
	eventually.True(t, 10*time.Second, fmt.Sprintf("command %d to die after leasehold was killed", pid), func() bool { return !alive(pid) })
}

// TestLeaseLost pauses a holder past its lease: another process acquires
// the key with a greater token meanwhile. The holder's command does not
// run on beside it: its supervisor, which holds the lease deadline, kills
// it when the deadline passes without an extension (before the backend
// can grant the key again); when the holder resumes it exits non-zero,
// saying the lease was lost or its command was killed for it.
func TestLeaseLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ready := e.path("ready")
	// A TTL a starved holder can still renew (at 600 ms, under two CPU
	// hogs, the supervisor killed the command at the deadline before it
	// had started: the guarantee, but not this test's scenario).
	holder := e.start("lock", "--ttl", "2s", "k", "--", "sh", "-c", holderScript("exec sleep 60"), ready)
	token1, pid := readReady(t, holder, ready)
	if err := holder.cmd.Process.Signal(childproc.SigStop); err != nil {
		t.Fatal(err)
	}
	// While the holder is stopped its lease expires on the backend, and
	// another process gets the key.
	r := e.run("lock", "--wait", "20s", "k", "--", "sh", "-c", `echo "$LEASEHOLD_TOKEN"`)
	if r.code != 0 {
		holder.cmd.Process.Signal(childproc.SigCont)
		t.Fatalf("second lock exited %d while the holder was stopped; stderr: %s", r.code, r.stderr)
	}
	if token2 := parseToken(t, r.stdout); token2 <= token1 {
		t.Errorf("second holder got token %d, not greater than the first's %d", token2, token1)
	}
	// The supervisor killed the stopped holder's command at the deadline,
	// which comes before the backend's expiry; reaping may lag a little.
	eventually.True(t, 10*time.Second, fmt.Sprintf("the stopped holder's command %d to be dead", pid), func() bool { return !alive(pid) })
	if err := holder.cmd.Process.Signal(childproc.SigCont); err != nil {
		t.Fatal(err)
	}
	if code := holder.wait(t, 20*time.Second); code == 0 {
		t.Fatalf("holder exited 0 after losing its lease; stderr: %s", holder.stderr.String())
	}
	if s := holder.stderr.String(); !strings.Contains(s, "lease lost") && !strings.Contains(s, "supervisor killed it") {
		t.Errorf("holder stderr says neither that the lease was lost nor that its command was killed: %s", s)
	}
}

// TestClusterFlock: 4 concurrent workers each run 50 leasehold processes
// on one key; the command (this test binary as a helper) logs its start and
// end on CLOCK_MONOTONIC. No two critical sections may overlap, and tokens
// must strictly increase in log order.
func TestClusterFlock(t *testing.T) {
	t.Parallel()
	const workers, rounds = 4, 50
	e := newEnv(t)
	logPath := e.path("log")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				cmd := e.command("--instance", fmt.Sprintf("worker-%d", w), "lock", "flock", "--", self)
				cmd.Env = append(cmd.Env, helperEnv+"=append", "LEASEHOLD_TEST_LOG="+logPath)
				if out, err := cmd.CombinedOutput(); err != nil {
					errs <- fmt.Errorf("worker %d round %d: %v: %s", w, i, err, out)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 2*workers*rounds {
		t.Fatalf("log has %d lines, want %d", len(lines), 2*workers*rounds)
	}
	type entry struct {
		kind       string
		token, pid uint64
		mono       int64
	}
	parse := func(i int) entry {
		f := strings.Fields(lines[i])
		if len(f) != 4 {
			t.Fatalf("log line %d: %q", i+1, lines[i])
		}
		var en entry
		var err1, err2, err3 error
		en.kind = f[0]
		en.token, err1 = strconv.ParseUint(f[1], 10, 64)
		en.pid, err2 = strconv.ParseUint(f[2], 10, 64)
		en.mono, err3 = strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("log line %d: %q", i+1, lines[i])
		}
		return en
	}
	var prevEnd entry
	for i := 0; i < len(lines); i += 2 {
		s, en := parse(i), parse(i+1)
		if s.kind != "S" || en.kind != "E" || s.token != en.token || s.pid != en.pid {
			t.Fatalf("log lines %d-%d interleave: %q, %q (two holders at once)", i+1, i+2, lines[i], lines[i+1])
		}
		if en.mono < s.mono {
			t.Fatalf("log line %d: end before start", i+2)
		}
		if i > 0 {
			if s.token <= prevEnd.token {
				t.Fatalf("log line %d: token %d after %d: tokens do not strictly increase", i+1, s.token, prevEnd.token)
			}
			if s.mono <= prevEnd.mono {
				t.Fatalf("log line %d: section with token %d started at %d, before the previous one (token %d) ended at %d",
					i+1, s.token, s.mono, prevEnd.token, prevEnd.mono)
			}
		}
		prevEnd = en
	}
}
