//go:build unix

package childproc

import (
	"errors"
	"os"
	"syscall"
)

// The signals the harnesses and supervisors use, named once so that their
// callers build on every system.
var (
	SigStop os.Signal = syscall.SIGSTOP // pause (not on Windows)
	SigCont os.Signal = syscall.SIGCONT // resume (not on Windows)
	SigUsr1 os.Signal = syscall.SIGUSR1 // a control message (not on Windows)

	sigTerm os.Signal = syscall.SIGTERM
	sigKill os.Signal = syscall.SIGKILL
)

func sysProcAttr(o Options) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: o.Group}
	if o.DieWithParent {
		dieWithParent(a)
	}
	return a
}

// SignalGroup sends sig to process group pgid. A group that is gone
// gives os.ErrProcessDone.
func SignalGroup(pgid int, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return ErrUnsupported
	}
	if pgid <= 1 {
		return errors.New("childproc: refusing to signal process group " + itoa(pgid))
	}
	return done(syscall.Kill(-pgid, s))
}

// KillPID sends SIGKILL to the process pid.
func KillPID(pid int) error { return done(syscall.Kill(pid, syscall.SIGKILL)) }

// Signal sends sig to the process p alone (on Windows, a signal that asks
// a process to stop kills it; see the package comment).
func Signal(p *os.Process, sig os.Signal) error { return p.Signal(sig) }

// CanPause says whether Pause, Resume, SigStop, SigCont and SigUsr1 work here.
const CanPause = true

// Pause stops p with SIGSTOP.
func Pause(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }

// Resume continues p with SIGCONT.
func Resume(p *os.Process) error { return p.Signal(syscall.SIGCONT) }

func done(err error) error {
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

func itoa(n int) string {
	if n < 0 {
		return "-" + itoa(-n)
	}
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
