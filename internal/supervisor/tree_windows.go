package supervisor

import (
	"errors"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/windows"
)

var ignoredSignals = []os.Signal{os.Interrupt}

const sigTerm = int(syscall.SIGTERM)

func signalName(n int) string { return syscall.Signal(n).String() }

func signalNumber(sig os.Signal) (int, bool) {
	s, ok := sig.(syscall.Signal)
	return int(s), ok
}

func supervisorAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
}

var getTickCount64 = windows.NewLazySystemDLL("kernel32.dll").NewProc("GetTickCount64")

// monoNow: the system's tick count (GetTickCount64), shared by every
// process, in nanoseconds (millisecond resolution).
func monoNow() int64 {
	ms, _, _ := getTickCount64.Call()
	return int64(ms) * 1e6
}

func killGroup(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
		_ = p.Release()
	}
}

func killCgroup(string) {}

// leaderHeld: Windows has no parent to check; the process is killed by pid.
func leaderHeld(_, pid int) bool { return true }

// closeInherited: Windows passes only handles marked inheritable, and
// exec.Cmd passes the standard ones alone.
func closeInherited() {}

// winTree is the command's process alone: what it starts is not reached
// (a job object would; not done here).
type winTree struct {
	cmd       *exec.Cmd
	exitCh    chan exitStatus
	noChildCh chan struct{}
}

func startTree(w wire) (tree, error) {
	cmd := exec.Command(w.Path, w.Argv[1:]...)
	cmd.Args = w.Argv
	cmd.Dir, cmd.Env = w.Dir, w.Env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	t := &winTree{cmd: cmd, exitCh: make(chan exitStatus, 1), noChildCh: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		st := exitStatus{}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			st.code = ee.ExitCode()
		}
		t.exitCh <- st
		close(t.noChildCh)
	}()
	return t, nil
}

func (t *winTree) mode() string               { return ModeProcess }
func (t *winTree) cgroup() string             { return "" }
func (t *winTree) pid() int                   { return t.cmd.Process.Pid }
func (t *winTree) exited() <-chan exitStatus  { return t.exitCh }
func (t *winTree) childless() <-chan struct{} { return t.noChildCh }
func (t *winTree) signal(int)                 { _ = t.cmd.Process.Kill() }
func (t *winTree) kill()                      { _ = t.cmd.Process.Kill() }
func (t *winTree) running() int               { return 0 }
func (t *winTree) empty() bool                { return true }
func (t *winTree) release()                   {}

// KillModeFor says which kill mode a supervisor started by this process
// would use, and why, for "leasehold doctor".
func KillModeFor() (mode, why string) {
	return ModeProcess, "the command's process alone (no process groups or job objects here: what it starts is not killed)"
}

// killPausedTree: the command's process alone is held here.
func killPausedTree(int) {}
