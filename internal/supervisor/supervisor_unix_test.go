//go:build unix

package supervisor

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// The test binary doubles as the supervisor (os.Executable is Start's
// default), and as a caller that is then killed (callerEnv).
const callerEnv = "SUPERVISOR_TEST_CALLER"

func TestMain(m *testing.M) {
	if IsSupervisor(os.Args) {
		os.Exit(Main())
	}
	if f := os.Getenv(callerEnv); f != "" {
		os.Exit(callerMain(f))
	}
	os.Exit(m.Run())
}

// callerMain starts a script under a supervisor, writes the supervisor's
// pid to file and hangs until killed.
func callerMain(file string) int {
	h, err := Start(Spec{Argv: []string{"sh", "-c", os.Getenv("SUPERVISOR_TEST_SCRIPT")}, Env: os.Environ()}, Options{})
	if err != nil {
		return 2
	}
	_ = os.WriteFile(file+".tmp", []byte(strconv.Itoa(h.SupervisorPid())+"\n"), 0o600)
	_ = os.Rename(file+".tmp", file)
	select {}
}

// modes runs f in each kill mode this host has.
func modes(t *testing.T, f func(t *testing.T)) {
	for _, m := range []string{"auto", ModeGroup} {
		t.Run(m, func(t *testing.T) {
			if m == ModeGroup {
				t.Setenv(ModeEnv, ModeGroup)
			} else {
				t.Setenv(ModeEnv, "")
			}
			f(t)
		})
	}
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	// A zombie is dead: "pid (comm) Z ...".
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// readPids waits for a file of pids a script writes.
func readPids(t *testing.T, path string, n int) []int {
	t.Helper()
	var pids []int
	eventually.True(t, 20*time.Second, "pids in "+path, func() bool {
		b, _ := os.ReadFile(path)
		f := strings.Fields(string(b))
		if len(f) < n {
			return false
		}
		pids = pids[:0]
		for _, s := range f[:n] {
			p, err := strconv.Atoi(s)
			if err != nil {
				return false
			}
			pids = append(pids, p)
		}
		return true
	})
	return pids
}

func start(t *testing.T, script string, args ...string) *Handle {
	t.Helper()
	h, err := Start(Spec{Argv: append([]string{"sh", "-c", script}, args...), Env: os.Environ()}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Kill(); h.Wait() })
	return h
}

// TestLeftoversKilledAtExit: a command that exits leaving processes behind
// — in its group, double-forked into a session of their own — ends only
// once they are killed, and the result counts them.
func TestLeftoversKilledAtExit(t *testing.T) {
	modes(t, func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "pids")
		h := start(t, `sleep 300 >/dev/null 2>&1 & a=$!; setsid sh -c 'sleep 300 >/dev/null 2>&1 & echo $! > "$0.b"; ' "$0"; `+
			`while [ ! -s "$0.b" ]; do :; done; echo "$a $(cat "$0.b")" > "$0"; exit 0`, f)
		t.Logf("mode %s", h.Mode())
		res := h.Wait()
		if res.Err != nil || res.Leftovers < 1 {
			t.Fatalf("result = %+v; want a zero exit and leftovers counted", res)
		}
		for _, p := range readPids(t, f, 2) {
			if alive(p) {
				t.Fatalf("leftover %d still runs after the run ended (mode %s)", p, h.Mode())
			}
		}
	})
}

// TestTerminateKillsWhatIgnoresTerm: Terminate's SIGTERM ends the shell;
// the subshell that ignores it is SIGKILLed at the grace's end, and the
// run ends only then.
func TestTerminateKillsWhatIgnoresTerm(t *testing.T) {
	modes(t, func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "pids")
		h := start(t, `(trap '' TERM; echo $(exec sh -c 'echo $PPID') > "$0"; exec sleep 300); true`, f)
		p := readPids(t, f, 1)[0]
		t0 := time.Now()
		if err := h.Terminate(300 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		h.Wait()
		if alive(p) {
			t.Fatalf("subshell %d ignoring SIGTERM outlived the run", p)
		}
		if took := time.Since(t0); took < 300*time.Millisecond {
			t.Fatalf("ended after %v, before the grace", took)
		}
	})
}

// TestDeadlineKills: a deadline that passes without an extension kills the
// tree; extensions before it keep it alive.
func TestDeadlineKills(t *testing.T) {
	modes(t, func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "pids")
		h, err := Start(Spec{Argv: []string{"sh", "-c", `sleep 300 & echo $! > "$0"; wait`, f}, Env: os.Environ()},
			Options{Deadline: time.Now().Add(2 * time.Second), MaxAhead: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		p := readPids(t, f, 1)[0]
		for range 3 {
			if err := h.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond) // extensions, not a condition: nothing may die meanwhile
			if !alive(p) {
				t.Fatal("killed while its deadline was being extended")
			}
		}
		last := time.Now().Add(300 * time.Millisecond)
		if err := h.SetDeadline(last); err != nil {
			t.Fatal(err)
		}
		res := h.Wait()
		if !strings.Contains(res.Killed, "deadline") || alive(p) {
			t.Fatalf("result %+v, grandchild alive %v; want killed at the deadline", res, alive(p))
		}
		if time.Now().Before(last) {
			t.Fatal("killed before the deadline")
		}
	})
}

// TestCallerDeathKills: when the caller dies (SIGKILL), the supervisor
// sees its control pipe close and kills the tree, a setsid'd grandchild
// included.
func TestCallerDeathKills(t *testing.T) {
	modes(t, func(t *testing.T) {
		dir := t.TempDir()
		pf, sf := filepath.Join(dir, "pids"), filepath.Join(dir, "sup")
		caller := exec.Command(os.Args[0])
		caller.Env = append(os.Environ(), callerEnv+"="+sf,
			"SUPERVISOR_TEST_SCRIPT=setsid sleep 300 & echo $! > "+pf+"; wait")
		if err := caller.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = caller.Process.Kill(); _ = caller.Wait() })
		sup := readPids(t, sf, 1)[0]
		p := readPids(t, pf, 1)[0]
		_ = caller.Process.Kill()
		_ = caller.Wait()
		eventually.True(t, 10*time.Second, "grandchild killed after the caller died", func() bool { return !alive(p) })
		eventually.True(t, 10*time.Second, "supervisor exited", func() bool { return !alive(sup) })
	})
}

// TestOnlyStandardDescriptors: a descriptor the caller holds without
// close-on-exec does not reach the command.
func TestOnlyStandardDescriptors(t *testing.T) {
	fd, err := syscall.Open(filepath.Join(t.TempDir(), "secret"), syscall.O_CREAT|syscall.O_RDWR, 0o600) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	out := filepath.Join(t.TempDir(), "fds")
	h := start(t, `ls /dev/fd/ > "$0"`, out)
	if res := h.Wait(); res.Err != nil {
		t.Fatal(res.Err)
	}
	b, _ := os.ReadFile(out)
	for _, s := range strings.Fields(string(b)) {
		if n, _ := strconv.Atoi(s); n > 3 { // 3: ls's own directory
			t.Fatalf("the command had descriptors %q; want 0, 1, 2 (the caller's fd %d leaked)", b, fd)
		}
	}
}

// TestExitStatusAndNotFound: the command's exit status comes back as
// exec's does; a missing command is os.ErrNotExist / exec.ErrNotFound.
func TestExitStatusAndNotFound(t *testing.T) {
	h := start(t, "exit 3")
	var ee *ExitError
	if res := h.Wait(); !errors.As(res.Err, &ee) || ee.Code != 3 || res.Err.Error() != "exit status 3" {
		t.Fatalf("result %+v; want exit status 3", res)
	}
	if _, err := Start(Spec{Argv: []string{"no-such-command-here"}}, Options{}); !errors.Is(err, exec.ErrNotFound) {
		t.Fatalf("Start of a missing command = %v; want exec.ErrNotFound", err)
	}
	if _, err := Start(Spec{Argv: []string{"/no/such/file"}}, Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Start of a missing path = %v; want os.ErrNotExist", err)
	}
}

// TestSupervisorKilledOrPaused: a supervisor that is SIGKILLed has its
// command killed by the kernel (Pdeathsig) and the rest by the caller,
// which sees it die without an exit report; a supervisor that is paused
// does not hold up the caller's Kill. What is reached: the process group,
// and with a cgroup leaf — or a paused supervisor, whose descendants the
// caller walks — a grandchild in a session of its own too.
func TestSupervisorKilledOrPaused(t *testing.T) {
	for _, how := range []string{"killed", "paused"} {
		t.Run(how, func(t *testing.T) {
			modes(t, func(t *testing.T) {
				f := filepath.Join(t.TempDir(), "pids")
				h := start(t, `sleep 300 >/dev/null 2>&1 & a=$!; setsid sleep 300 >/dev/null 2>&1 & echo "$a $!" > "$0"; wait`, f)
				p := readPids(t, f, 2)
				sup, _ := os.FindProcess(h.SupervisorPid())
				if how == "killed" {
					_ = sup.Kill()
				} else {
					_ = sup.Signal(syscall.SIGSTOP)
					t.Cleanup(func() { _ = sup.Kill() })
					_ = h.Kill()
				}
				reach := p[:1]
				if h.Mode() == ModeCgroup || how == "paused" {
					reach = p // a paused supervisor's orphans are still its children: the caller reaches them
				}
				for _, pid := range append(reach, h.Pid()) {
					eventually.True(t, 10*time.Second, "pid "+strconv.Itoa(pid)+" killed", func() bool { return !alive(pid) })
				}
				if how == "killed" {
					if res := h.Wait(); !errors.Is(res.Err, ErrSupervisor) {
						t.Fatalf("result %+v; want ErrSupervisor", res)
					}
				} else {
					_ = sup.Kill()
				}
				_ = syscall.Kill(p[1], syscall.SIGKILL) // out of reach in a process group alone
			})
		})
	}
}

// TestPoolRoutesOutput: each command started from a pool — on a spare
// spawned ahead, or a new one — writes to its own Start's writers, and a
// closed pool refuses.
func TestPoolRoutesOutput(t *testing.T) {
	p := NewPool("", time.Second)
	for i := range 4 {
		var out testkit.Buffer
		h, err := p.Start(Spec{Argv: []string{"sh", "-c", "echo out $0; echo err $0 >&2", strconv.Itoa(i)}}, Options{Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatal(err)
		}
		if res := h.Wait(); res.Err != nil {
			t.Fatal(res.Err)
		}
		if got := out.String(); !strings.Contains(got, "out "+strconv.Itoa(i)+"\n") || !strings.Contains(got, "err "+strconv.Itoa(i)+"\n") || len(got) != 12 {
			t.Fatalf("start %d wrote %q", i, got)
		}
	}
	p.Close()
	if _, err := p.Start(Spec{Argv: []string{"true"}}, Options{}); !errors.Is(err, ErrSupervisor) {
		t.Fatalf("Start on a closed pool = %v; want ErrSupervisor", err)
	}
}

// TestPausedSupervisorWithFullPipeDoesNotHoldKill: a supervisor paused
// long enough for the caller's deadline extensions to fill its control
// pipe (one per renewal: hours of them) must not hold up the caller
// either: the extensions fail instead of blocking, and Kill still kills
// the command's group directly.
func TestPausedSupervisorWithFullPipeDoesNotHoldKill(t *testing.T) {
	h := start(t, `exec sleep 300`)
	sup, _ := os.FindProcess(h.SupervisorPid())
	if err := sup.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sup.Kill() })
	filled := make(chan error, 1)
	go func() {
		for {
			if err := h.SetDeadline(time.Now().Add(time.Minute)); err != nil {
				filled <- err
				return
			}
		}
	}()
	select {
	case err := <-filled:
		t.Logf("an extension to the paused supervisor failed once its pipe was full: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("an extension to a paused supervisor whose control pipe is full blocked for 20 s")
	}
	killed := make(chan struct{})
	go func() { _ = h.Kill(); close(killed) }()
	eventually.True(t, 10*time.Second, "the command killed by Kill despite the paused supervisor", func() bool { return !alive(h.Pid()) })
	<-killed
}

// TestMalformedControlMessageKills: a control message leasehold never
// sends — a deadline with no instant or one that is not a number, an
// unknown kind — kills the tree instead of turning the deadline off (a
// "D" whose argument failed to parse used to read as 0: no deadline).
func TestMalformedControlMessageKills(t *testing.T) {
	for _, m := range []string{"D x", "D 0", "D -5", "Z 1"} {
		t.Run(m, func(t *testing.T) {
			h, err := Start(Spec{Argv: []string{"sleep", "300"}, Env: os.Environ()},
				Options{Deadline: time.Now().Add(time.Minute), MaxAhead: 2 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = h.Kill(); h.Wait() })
			if err := h.send(m); err != nil {
				t.Fatal(err)
			}
			done := make(chan Result, 1)
			go func() { done <- h.Wait() }()
			select {
			case res := <-done:
				if !strings.Contains(res.Killed, "malformed") && !strings.Contains(res.Killed, "no instant") {
					t.Fatalf("after %q: result %+v, want the tree killed for the malformed message", m, res)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("after %q the command still runs 20 s later (its deadline is a minute away): the message was taken", m)
			}
		})
	}
}
