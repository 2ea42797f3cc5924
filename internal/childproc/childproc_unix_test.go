//go:build unix

package childproc

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

	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// gone reports whether pid no longer runs (a zombie counts as gone).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	out, err := exec.Command("ps", "-o", "stat=", "-p", strconv.Itoa(pid)).Output()
	return err != nil || strings.HasPrefix(strings.TrimSpace(string(out)), "Z")
}

// waitGone waits up to within for pid to be gone.
func waitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	eventually.True(t, within, "pid "+strconv.Itoa(pid)+" gone", func() bool { return gone(pid) })
}

// readPids waits for the file a script writes its pids to.
func readPids(t *testing.T, path string, n int) []int {
	t.Helper()
	var b []byte
	if !eventually.Within(10*time.Second, func() bool {
		b, _ = os.ReadFile(path)
		return len(strings.Fields(string(b))) >= n
	}) {
		t.Fatalf("%s: no %d pids within 10s (%q)", path, n, b)
	}
	var pids []int
	for _, s := range strings.Fields(string(b))[:n] {
		p, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("%s: %q", path, b)
		}
		pids = append(pids, p)
	}
	return pids
}

// TestStopTerminatesTheGroup: Stop's SIGTERM reaches the child and what it
// started in its group, and a child that exits on SIGTERM is not waited
// out for the grace.
func TestStopTerminatesTheGroup(t *testing.T) {
	pids := filepath.Join(t.TempDir(), "pids")
	// The grandchild is a background sleep in the same group; sh's wait is
	// interrupted by SIGTERM, which kills sh.
	c, err := Start(exec.Command("sh", "-c", `sleep 60 & echo "$$ $!" > "$0"; wait`, pids), Options{Group: true})
	if err != nil {
		t.Fatal(err)
	}
	p := readPids(t, pids, 2)
	if p[0] != c.Pid() {
		t.Fatalf("the script reports pid %d, Start %d", p[0], c.Pid())
	}
	if pg, err := syscall.Getpgid(c.Pid()); err != nil || pg != c.Pid() {
		t.Fatalf("child's process group = %d, %v; want its own (%d)", pg, err, c.Pid())
	}
	err = c.Stop(time.Minute, nil)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("Stop = %v; want the child ended by SIGTERM", err)
	}
	waitGone(t, p[1], 10*time.Second) // the grandchild got the SIGTERM too
}

// TestStopKillsAfterTheGrace: a child that ignores SIGTERM is SIGKILLed
// once the grace has passed, and at once when now is closed.
func TestStopKillsAfterTheGrace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration
		now   bool
	}{{"grace", 100 * time.Millisecond, false}, {"now", time.Hour, true}, {"no grace", 0, false}} {
		t.Run(tc.name, func(t *testing.T) {
			pids := filepath.Join(t.TempDir(), "pids")
			c, err := Start(exec.Command("sh", "-c", `trap "" TERM; echo "$$" > "$0"; exec sleep 60`, pids), Options{Group: true})
			if err != nil {
				t.Fatal(err)
			}
			readPids(t, pids, 1)
			now := make(chan struct{})
			if tc.now {
				close(now)
			}
			err = c.Stop(tc.grace, now)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("Stop = %v; want the child ended by SIGKILL", err)
			}
		})
	}
}

// TestSignalAfterExit: signalling a child without a group of its own after
// it exited is os.ErrProcessDone, never a signal to a reused pid.
func TestSignalAfterExit(t *testing.T) {
	c, err := Start(exec.Command("true"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("Kill after exit = %v; want os.ErrProcessDone", err)
	}
}

// TestSignalGroupRefusesInit: a pgid of 0 or 1 would signal this process's
// own group or every process.
func TestSignalGroupRefusesInit(t *testing.T) {
	for _, pg := range []int{-3, 0, 1} {
		if err := SignalGroup(pg, syscall.Signal(0)); err == nil {
			t.Fatalf("SignalGroup(%d) = nil; want a refusal", pg)
		}
	}
}
