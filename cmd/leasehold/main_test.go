package main

// The tests run the real binary, built once by TestMain, against a SQLite
// file in a temporary directory. The test binary doubles as a helper command
// (see helperMain) that leasehold runs under a lock.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/childproc"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// bin is the leasehold binary under test, built by TestMain.
var bin string

const helperEnv = "LEASEHOLD_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	dir, err := os.MkdirTemp("", "leasehold-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "leasehold")
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command(gobin, append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// env is one test's backend and scratch directory.
type env struct {
	t   *testing.T
	dir string
	url string
	// bare: commands get no --backend (they take it from --config or the
	// default).
	bare bool
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	return &env{t: t, dir: dir, url: "sqlite://" + filepath.Join(dir, "leasehold.db")}
}

func (e *env) path(name string) string { return filepath.Join(e.dir, name) }

// command returns leasehold with args against the test's backend. The
// environment keeps leasehold away from the user's state directory, and
// stops race-enabled binaries (leasehold, and this test binary as a helper)
// from sleeping a second at exit, which the race detector does by default.
func (e *env) command(args ...string) *exec.Cmd {
	cmd := exec.Command(bin, append([]string{"--backend", e.url}, args...)...)
	if e.bare {
		cmd = exec.Command(bin, args...)
	}
	cmd.Env = append(os.Environ(),
		"LEASEHOLD_BACKEND=", "HOME="+e.dir, "XDG_STATE_HOME="+e.path("state"),
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	return cmd
}

type result struct {
	stdout, stderr string
	code           int
	elapsed        time.Duration
}

// run runs leasehold to completion (bounded by a minute).
func (e *env) run(args ...string) result {
	e.t.Helper()
	cmd := e.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	timer := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	timer.Stop()
	r := result{stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		e.t.Fatalf("leasehold %q: %v", args, err)
	}
	return r
}

// expect runs leasehold and checks its exit code.
func (e *env) expect(code int, args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	if r.code != code {
		e.t.Fatalf("leasehold %q exited %d, want %d\nstdout: %s\nstderr: %s", args, r.code, code, r.stdout, r.stderr)
	}
	return r
}

// proc is a leasehold process running in the background.
type proc struct {
	cmd    *exec.Cmd
	stderr testkit.Buffer
	done   chan struct{}
	err    error
}

// start starts leasehold in the background; the test's cleanup kills it
// (and, through Pdeathsig, its command).
func (e *env) start(args ...string) *proc {
	e.t.Helper()
	p := &proc{cmd: e.command(args...), done: make(chan struct{})}
	p.cmd.Stderr = &p.stderr
	// Wait returns soon after leasehold exits even if a command that
	// outlived it still holds the stderr pipe.
	p.cmd.WaitDelay = time.Second
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	e.t.Cleanup(func() {
		p.cmd.Process.Signal(childproc.SigCont)
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("leasehold %q did not exit within %v; stderr: %s", p.cmd.Args, timeout, p.stderr.String())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("leasehold: %v", p.err)
	}
	return 0
}

// holderScript is a command for "leasehold lock" that writes
// "$LEASEHOLD_TOKEN $$" atomically to the file $0 and then runs the rest of
// the script. "exec" keeps $$ the pid of the command that runs last.
func holderScript(then string) string {
	return `echo "$LEASEHOLD_TOKEN $$" > "$0.tmp" && mv "$0.tmp" "$0" && ` + then
}

// readReady waits for a file written by holderScript and returns the token
// and pid in it.
func readReady(t *testing.T, p *proc, file string) (token uint64, pid int) {
	t.Helper()
	var data []byte
	eventually.True(t, 20*time.Second, "the command under the lock to start ("+file+")", func() bool {
		select {
		case <-p.done:
			t.Fatalf("leasehold exited before its command started: %v; stderr: %s", p.err, p.stderr.String())
		default:
		}
		var err error
		data, err = os.ReadFile(file)
		return err == nil
	})
	f := strings.Fields(string(data))
	if len(f) != 2 {
		t.Fatalf("%s: %q", file, data)
	}
	token = parseToken(t, f[0])
	pid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return token, pid
}

func parseToken(t *testing.T, s string) uint64 {
	t.Helper()
	tok, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil || tok == 0 {
		t.Fatalf("token %q: not a positive integer (%v)", s, err)
	}
	return tok
}

// alive reports whether pid is a live process (not gone, not a zombie).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}
