package childproc

import (
	"os"
	"syscall"
)

// unsupportedSignal names a Unix signal Windows has no equivalent for;
// sending it fails.
type unsupportedSignal string

func (s unsupportedSignal) String() string { return string(s) }
func (unsupportedSignal) Signal()          {}

var (
	SigStop os.Signal = unsupportedSignal("SIGSTOP")
	SigCont os.Signal = unsupportedSignal("SIGCONT")
	SigUsr1 os.Signal = unsupportedSignal("SIGUSR1")

	sigTerm os.Signal = syscall.SIGTERM
	sigKill os.Signal = syscall.SIGKILL
)

func sysProcAttr(o Options) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{}
	if o.Group {
		a.CreationFlags = syscall.CREATE_NEW_PROCESS_GROUP
	}
	return a // DieWithParent: nothing here does it (a job object would)
}

// SignalGroup ends the process pgid (Windows has no process groups to
// signal): SIGINT, SIGTERM and SIGKILL kill it, other signals are
// unsupported.
func SignalGroup(pgid int, sig os.Signal) error {
	p, err := os.FindProcess(pgid)
	if err != nil {
		return os.ErrProcessDone
	}
	defer p.Release()
	return Signal(p, sig)
}

// KillPID kills the process pid.
func KillPID(pid int) error { return SignalGroup(pid, sigKill) }

// Signal sends sig to the process p alone: SIGINT, SIGTERM, SIGHUP and
// SIGKILL kill it (Windows cannot ask a process to stop), other signals
// are unsupported.
func Signal(p *os.Process, sig os.Signal) error {
	switch sig {
	case os.Kill, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP:
		return p.Kill()
	}
	return ErrUnsupported
}

// CanPause says whether Pause, Resume, SigStop, SigCont and SigUsr1 work here.
const CanPause = false

// Pause is not supported on Windows.
func Pause(*os.Process) error { return ErrUnsupported }

// Resume is not supported on Windows.
func Resume(*os.Process) error { return ErrUnsupported }
