//go:build unix

package supervisor

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

var ignoredSignals = []os.Signal{syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGPIPE}

const sigTerm = int(syscall.SIGTERM)

func signalName(n int) string { return syscall.Signal(n).String() }

func signalNumber(sig os.Signal) (int, bool) {
	s, ok := sig.(syscall.Signal)
	return int(s), ok
}

// supervisorAttr: the supervisor gets a process group of its own, so that
// a signal to the caller's group (Ctrl-C, a job control kill) does not
// reach it; the caller drives it through its pipe. It gets no Pdeathsig:
// the end of its control pipe tells it the caller died, and then it must
// live to kill the tree.
func supervisorAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// monoNow reads CLOCK_MONOTONIC, which every process on the host shares.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("clock_gettime(CLOCK_MONOTONIC): " + err.Error()) // cannot fail
	}
	return ts.Nano()
}

// killGroup sends SIGKILL to process group pgid.
func killGroup(pgid int) {
	if pgid > 1 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// closeInherited marks every descriptor above stderr close-on-exec: the
// command gets stdin, stdout and stderr only, whatever the caller
// inherited without close-on-exec.
func closeInherited() {
	if closeRange() {
		return
	}
	ents, err := os.ReadDir("/dev/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		var fd int
		for _, c := range e.Name() {
			fd = fd*10 + int(c-'0')
		}
		if fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

// unixTree is a command in a process group of its own, reaped here: the
// supervisor waits for any child (wait4(-1)), so that orphans reparented
// to it (it is their subreaper on Linux) are reaped too, and "no child
// left" means the tree is gone.
type unixTree struct {
	leader    int
	reaped    atomic.Bool // the leader was waited for: its pid may be reused
	exitCh    chan exitStatus
	noChildCh chan struct{}
	cg        *cgroupLeaf // nil unless ModeCgroup
}

func startTree(w wire) (tree, error) {
	becomeSubreaper()
	var cg *cgroupLeaf
	if os.Getenv(ModeEnv) != ModeGroup {
		cg = newCgroupLeaf()
	}
	attr := &syscall.ProcAttr{Dir: w.Dir, Env: w.Env, Files: []uintptr{0, 1, 2}}
	pid, err := forkExec(w.Path, w.Argv, attr, cg)
	if err != nil && cg != nil {
		cg.remove()
		cg = nil
		pid, err = forkExec(w.Path, w.Argv, attr, nil)
	}
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			err = &os.PathError{Op: "exec", Path: w.Path, Err: os.ErrNotExist}
		}
		return nil, err
	}
	t := &unixTree{leader: pid, exitCh: make(chan exitStatus, 1), noChildCh: make(chan struct{}), cg: cg}
	go t.reap()
	return t, nil
}

func (t *unixTree) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil { // ECHILD: no child left
			close(t.noChildCh)
			return
		}
		if pid == t.leader {
			t.reaped.Store(true)
			st := exitStatus{code: ws.ExitStatus()}
			if ws.Signaled() {
				st = exitStatus{code: -1, signal: int(ws.Signal())}
			}
			t.exitCh <- st
		}
	}
}

func (t *unixTree) mode() string {
	if t.cg != nil {
		return ModeCgroup
	}
	return ModeGroup
}

func (t *unixTree) cgroup() string {
	if t.cg != nil {
		return t.cg.path
	}
	return ""
}

func (t *unixTree) pid() int                   { return t.leader }
func (t *unixTree) exited() <-chan exitStatus  { return t.exitCh }
func (t *unixTree) childless() <-chan struct{} { return t.noChildCh }
func (t *unixTree) signal(sig int)             { t.send(syscall.Signal(sig)) }
func (t *unixTree) kill()                      { t.send(syscall.SIGKILL) }

func (t *unixTree) send(sig syscall.Signal) {
	if sig == syscall.SIGKILL && t.cg != nil {
		t.cg.kill()
	}
	if t.groupInReach() {
		_ = syscall.Kill(-t.leader, sig)
	}
	for _, pid := range descendants() {
		_ = syscall.Kill(pid, sig)
	}
	if t.cg != nil {
		for _, pid := range t.cg.procs() {
			_ = syscall.Kill(pid, sig)
		}
	}
}

func (t *unixTree) running() int {
	n := len(descendants())
	if t.cg != nil {
		n = max(n, len(t.cg.procs()))
	}
	if n == 0 && t.groupInReach() && groupAlive(t.leader) {
		n = 1
	}
	return n
}

// groupInReach reports whether the command's process group id still
// names its group. Once the leader is reaped its pid may be reused once
// the group empties, and a signal to the group could reach strangers:
// where the supervisor is the subreaper (Linux) every member of the group
// is its descendant anyway, and the group is addressed only while the
// leader is unreaped (then its pid is held).
func (t *unixTree) groupInReach() bool { return !hasSubreaper || !t.reaped.Load() }

func (t *unixTree) empty() bool {
	if t.groupInReach() && groupAlive(t.leader) {
		return false
	}
	return t.cg == nil || len(t.cg.procs()) == 0
}

func (t *unixTree) release() {
	if t.cg != nil {
		t.cg.remove()
	}
}

// groupAlive reports whether process group pgid has a member (a zombie
// still counts until reaped).
func groupAlive(pgid int) bool {
	return syscall.Kill(-pgid, 0) == nil
}
