// Package childproc supervises the child processes leasehold starts for
// itself — the demo's daemons, test servers, benchmark holders — the same
// way on every system, with the system-specific parts in per-OS files. (A
// user's command — a command job, the command of "leasehold lock" — runs
// under internal/supervisor, which owns its whole process tree.)
//
//   - Start puts the child in a process group of its own (Options.Group),
//     so a signal to leasehold's terminal group does not reach it and
//     Terminate and Kill reach what it started, and on Linux has the kernel
//     SIGKILL it when leasehold dies, even by SIGKILL (Options.DieWithParent,
//     Pdeathsig). Pdeathsig fires when the OS thread that started the child
//     exits, so Start starts and waits for the child on one goroutine locked
//     to its thread.
//   - Stop ends it: SIGTERM to the group, SIGKILL after a grace (or at once).
//
// What differs by system:
//
//   - Linux: all of the above.
//   - Other Unix systems (macOS, the BSDs): process groups and signals, but
//     no Pdeathsig (DieWithParent does nothing: a child outlives a leasehold
//     killed by SIGKILL).
//   - Windows: no process groups, no signals but kill. Group starts the child
//     with CREATE_NEW_PROCESS_GROUP (it does not get the console's Ctrl-C);
//     Terminate, Kill and every forwarded signal that asks a process to stop
//     end the child itself with TerminateProcess — no grace, and what the
//     child started is not reached (a job object would; not done here).
//     DieWithParent does nothing; Pause and Resume are not supported.
package childproc

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"time"
)

// ErrUnsupported is returned for what this system cannot do (pausing a
// process on Windows, a signal Windows has no equivalent for).
var ErrUnsupported = errors.New("childproc: not supported on " + runtime.GOOS)

// Options say how a child is started.
type Options struct {
	// Group starts the child in a process group of its own, which Terminate,
	// Kill and Signal address.
	Group bool
	// DieWithParent has the kernel SIGKILL the child when this process dies
	// (Linux only; see the package comment).
	DieWithParent bool
}

// Prepare sets cmd's system attributes for o. Start calls it; use it alone
// for a child that needs no locked thread (o.DieWithParent false).
func Prepare(cmd *exec.Cmd, o Options) { cmd.SysProcAttr = sysProcAttr(o) }

// Child is a started child process.
type Child struct {
	cmd   *exec.Cmd
	group bool
	done  chan struct{}
	err   error // Wait's error, set before done is closed
}

// Start starts cmd as o says and waits for it in the background; Done is
// closed when it has exited.
func Start(cmd *exec.Cmd, o Options) (*Child, error) {
	Prepare(cmd, o)
	c := &Child{cmd: cmd, group: o.Group, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// DieWithParent's Pdeathsig fires when the thread that forked exits:
		// start and wait on one thread, kept until the child is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.err = cmd.Wait()
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}

// Pid is the child's process id (with Group, also its process group id).
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Done is closed when the child has exited and been waited for.
func (c *Child) Done() <-chan struct{} { return c.done }

// Wait waits for the child to exit and returns exec.Cmd.Wait's error.
func (c *Child) Wait() error {
	<-c.done
	return c.err
}

// Signal sends sig to the child's process group (to the child alone
// without Group). A group or process that is gone gives os.ErrProcessDone.
func (c *Child) Signal(sig os.Signal) error { return c.signal(sig) }

// Terminate asks the child's group to stop: SIGTERM (Windows: it is
// killed, see the package comment).
func (c *Child) Terminate() error { return c.signal(sigTerm) }

// Kill kills the child's group: SIGKILL.
func (c *Child) Kill() error { return c.signal(sigKill) }

// Stop ends the child and returns Wait's error: Terminate, then Kill when
// grace has passed or now is closed, whichever comes first; grace <= 0
// kills at once. A child that exits on its own meanwhile is just waited for.
func (c *Child) Stop(grace time.Duration, now <-chan struct{}) error {
	if grace <= 0 {
		_ = c.Kill()
		return c.Wait()
	}
	_ = c.Terminate()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		_ = c.Kill()
	case <-now:
		_ = c.Kill()
	}
	return c.Wait()
}

func (c *Child) signal(sig os.Signal) error {
	select {
	case <-c.done:
		if !c.group {
			return os.ErrProcessDone
		}
	default:
	}
	if c.group {
		return SignalGroup(c.Pid(), sig)
	}
	return Signal(c.cmd.Process, sig)
}
