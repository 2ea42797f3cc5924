// Package supervisor runs a user's command — a command job of the daemon,
// the command of "leasehold lock" — under a small supervisor process that
// owns the command's whole process tree, so that nothing a run started
// outlives it (the model is systemd's KillMode=control-group, and Nomad's
// per-task executor, which outlives the agent):
//
//   - The supervisor is leasehold re-executed (Arg as its only argument;
//     the program's main calls Main when IsSupervisor). It starts the
//     command in a process group of its own and, on Linux, is the subreaper
//     of the command's descendants (an orphan is reparented to it, not to
//     init) and puts the command in a cgroup v2 leaf when one can be
//     created (Mode says which is in force: ModeCgroup or ModeGroup).
//   - The lease deadline lives in the supervisor: the caller sends it the
//     run's deadline on every confirmed renewal (SetDeadline; a value on
//     the host's CLOCK_MONOTONIC, which the supervisor checks against its
//     own reading of the same clock). If the deadline passes without an
//     extension — the caller paused, starved or dead — the supervisor kills
//     the whole tree at once; if its control pipe closes (the caller died),
//     it kills at once.
//   - A run ends only when its tree is gone: after the command exits (what
//     it left running is killed and counted in Result.Leftovers), after a
//     kill, after Terminate's grace (SIGKILL to every remaining
//     descendant), the supervisor confirms that no process of the tree
//     remains before it reports the command's exit.
//   - The command gets stdin, stdout and stderr and no other descriptor,
//     even ones the caller inherited without close-on-exec.
//
// What differs by system: Linux has all of the above. Other Unix systems
// (macOS, the BSDs) have no subreaper and no cgroups: the tree is the
// command's process group (ModeGroup), and a descendant that leaves it
// (setsid) and whose parent dies is out of reach. On Windows the
// supervisor holds the command's process alone (ModeProcess): what the
// command starts is not reached, and Terminate kills at once.
//
// If the supervisor itself is killed, the kernel kills the command (Linux
// Pdeathsig) and the caller, which sees the supervisor's status pipe close
// without an exit report, kills the command's process group and cgroup
// leaf. A paused (SIGSTOPped) supervisor enforces nothing: the caller's
// Kill, on a lost lease, also kills the group and the cgroup leaf directly,
// and on Linux every descendant of the stopped supervisor (its orphans are
// still its children).
package supervisor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Arg, as the only argument, runs leasehold as a supervisor (see Main).
const Arg = "__leasehold-supervise"

// IsSupervisor reports whether a process started with args (os.Args) is a
// supervisor: its main must then return Main's exit code.
func IsSupervisor(args []string) bool { return len(args) == 2 && args[1] == Arg }

// The ways a supervisor holds a command's tree.
const (
	// ModeCgroup: a cgroup v2 leaf of its own, and the subreaper (Linux).
	ModeCgroup = "cgroup"
	// ModeGroup: a process group of its own, and on Linux the subreaper.
	ModeGroup = "process-group"
	// ModeProcess: the command's process alone (Windows).
	ModeProcess = "process"
)

// ModeEnv, set to ModeGroup in a supervisor's environment, keeps it from
// trying a cgroup leaf (for tests of the fallback, and hosts where a
// leaf would be placed where it should not).
const ModeEnv = "LEASEHOLD_KILL_MODE"

// Spec is the command a supervisor runs.
type Spec struct {
	Argv []string // Argv[0] is looked up in PATH as exec.Command does
	Dir  string
	Env  []string
}

// Options say how the supervisor is started.
type Options struct {
	// Exe is the leasehold binary to run as the supervisor; empty: this
	// program (os.Executable).
	Exe string
	// Stdin, Stdout and Stderr are the command's, as in exec.Cmd.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// WaitDelay is exec.Cmd's, for the supervisor's output pipes.
	WaitDelay time.Duration
	// Deadline, if not zero, is enforced from the start: the tree is
	// killed when it passes without a SetDeadline that moves it.
	Deadline time.Time
	// MaxAhead, if positive, is the furthest a deadline may lie ahead when
	// the supervisor receives it (the lease's TTL): a later one is refused
	// and the tree killed.
	MaxAhead time.Duration
}

// ExitError is a command's exit other than a zero status.
type ExitError struct {
	Code   int // the exit status, or -1 when killed by a signal
	Signal int // the signal that killed it, or 0
}

func (e *ExitError) Error() string {
	if e.Signal != 0 {
		return "signal: " + signalName(e.Signal)
	}
	return "exit status " + strconv.Itoa(e.Code)
}

// Result is how a supervised command ended.
type Result struct {
	// Err is nil for a zero exit, an *ExitError for another, or why the
	// supervisor failed (it died: then its tree was killed by the caller).
	Err error
	// Leftovers is how many processes the command left running when it
	// exited; they were killed before the run ended.
	Leftovers int
	// Killed says why the supervisor killed the tree on its own (a deadline
	// passed, the control pipe closed), or is empty.
	Killed string
}

// ErrSupervisor wraps a failure of the supervisor process itself.
var ErrSupervisor = errors.New("supervisor")

// Handle is a command running under a supervisor.
type Handle struct {
	cmd  *exec.Cmd
	ctrl *os.File

	started struct {
		pid    int
		mode   string
		cgroup string
	}
	mu     sync.Mutex // serialises control writes
	closed bool

	done chan struct{}
	res  Result
}

// wire is what a supervisor is sent first, as one JSON line.
type wire struct {
	Spec
	Path     string
	Deadline int64 // CLOCK_MONOTONIC ns; 0: none
	MaxAhead int64 // ns; 0: no bound
}

// Start starts spec under a supervisor and returns once the command runs
// (or failed to start: an error wrapping exec.ErrNotFound or the exec
// error, as exec.Cmd.Start gives). It is Spawn, then Spare.Start.
func Start(spec Spec, o Options) (*Handle, error) {
	sp, err := Spawn(o)
	if err != nil {
		return nil, err
	}
	return sp.Start(spec, o.Deadline, o.MaxAhead)
}

// Spare is a supervisor started ahead of its command: starting a
// leasehold process costs some milliseconds (the runtime and package
// initialisation), which a caller can pay before it holds the lease —
// while it acquires a lock, or between runs (Pool).
type Spare struct {
	cmd    *exec.Cmd
	ctrl   *os.File
	status *os.File
	in     *bufio.Reader // reads status
	ready  bool          // its "ready" report was read
	used   bool
}

// Spawn starts a supervisor for o (its Exe, standard streams and
// WaitDelay; Deadline and MaxAhead are given to Spare.Start), waiting for
// its command.
func Spawn(o Options) (*Spare, error) {
	exe := o.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSupervisor, err)
		}
	}
	ctrlR, ctrlW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSupervisor, err)
	}
	statR, statW, err := os.Pipe()
	if err != nil {
		ctrlR.Close()
		ctrlW.Close()
		return nil, fmt.Errorf("%w: %w", ErrSupervisor, err)
	}
	cmd := exec.Command(exe, Arg)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Stdin, o.Stdout, o.Stderr
	cmd.WaitDelay = o.WaitDelay
	cmd.ExtraFiles = []*os.File{ctrlR, statW} // fds 3 and 4
	cmd.SysProcAttr = supervisorAttr()
	err = cmd.Start()
	ctrlR.Close()
	statW.Close()
	if err != nil {
		ctrlW.Close()
		statR.Close()
		return nil, fmt.Errorf("%w: start: %w", ErrSupervisor, err)
	}
	return &Spare{cmd: cmd, ctrl: ctrlW, status: statR, in: bufio.NewReader(statR)}, nil
}

// WaitReady waits until the spare supervisor has initialised and waits
// for its command (its first report).
func (sp *Spare) WaitReady() error {
	if sp.ready {
		return nil
	}
	line, err := sp.in.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		return fmt.Errorf("%w: no ready report (%q, %v)", ErrSupervisor, line, err)
	}
	sp.ready = true
	return nil
}

// Close ends a spare that will not be used (it exits when its control
// pipe closes). It does nothing after Start.
func (sp *Spare) Close() {
	if sp.used {
		return
	}
	sp.used = true
	sp.ctrl.Close()
	sp.status.Close()
	go func() { _ = sp.cmd.Wait() }()
}

// Start has the spare supervisor run spec, enforcing deadline (if not
// zero; see Options.Deadline and MaxAhead), and returns once the command
// runs, as the package's Start does. A spare is used once.
func (sp *Spare) Start(spec Spec, deadline time.Time, maxAhead time.Duration) (*Handle, error) {
	if sp.used {
		return nil, fmt.Errorf("%w: spare used twice", ErrSupervisor)
	}
	sp.used = true
	cmd, ctrlW, statR := sp.cmd, sp.ctrl, sp.status
	fail := func(err error) (*Handle, error) {
		ctrlW.Close()
		statR.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	if len(spec.Argv) == 0 {
		return fail(fmt.Errorf("%w: no command", ErrSupervisor))
	}
	// A bare name is looked up in PATH as exec.Command does (and, like it,
	// one found only relative to the current directory is refused).
	path := spec.Argv[0]
	if filepath.Base(path) == path {
		lp, err := exec.LookPath(path)
		if err != nil {
			return fail(fmt.Errorf("exec: %q: %w", path, err))
		}
		path = lp
	}
	w := wire{Spec: spec, Path: path, MaxAhead: int64(maxAhead)}
	if !deadline.IsZero() {
		w.Deadline = monoOf(deadline)
	}
	line, err := json.Marshal(w)
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrSupervisor, err))
	}
	h := &Handle{cmd: cmd, ctrl: ctrlW, done: make(chan struct{})}
	if _, err := ctrlW.Write(append(line, '\n')); err != nil {
		return fail(fmt.Errorf("%w: %w", ErrSupervisor, err))
	}
	status := sp.in
	err = sp.WaitReady()
	var first string
	if err == nil {
		first, err = status.ReadString('\n')
	}
	kind, rest, _ := strings.Cut(strings.TrimSpace(first), " ")
	if err != nil || kind != "started" {
		h.closeCtrl()
		_ = cmd.Wait()
		statR.Close()
		switch {
		case kind == "notfound":
			return nil, fmt.Errorf("exec: %s: %w", rest, os.ErrNotExist)
		case kind == "error":
			return nil, fmt.Errorf("exec: %s", rest)
		}
		return nil, fmt.Errorf("%w: no start report (%q, %v)", ErrSupervisor, first, err)
	}
	f := strings.SplitN(rest, " ", 3)
	if len(f) >= 2 {
		h.started.pid, _ = strconv.Atoi(f[0])
		h.started.mode = f[1]
	}
	if len(f) == 3 {
		h.started.cgroup = f[2]
	}
	go h.follow(status, statR)
	return h, nil
}

// follow reads the supervisor's reports until its exit report, waits for
// it, and closes done. A supervisor that dies without reporting has its
// tree killed here.
func (h *Handle) follow(status *bufio.Reader, statR *os.File) {
	defer close(h.done)
	var exited bool
	for {
		line, err := status.ReadString('\n')
		if err != nil {
			break
		}
		kind, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch kind {
		case "killed":
			h.res.Killed = rest
		case "exit":
			f := strings.Fields(rest)
			var code, sig, left int
			if len(f) == 3 {
				code, _ = strconv.Atoi(f[0])
				sig, _ = strconv.Atoi(f[1])
				left, _ = strconv.Atoi(f[2])
			}
			h.res.Leftovers = left
			if code != 0 || sig != 0 {
				h.res.Err = &ExitError{Code: code, Signal: sig}
			}
			exited = true
		}
	}
	statR.Close()
	h.closeCtrl()
	werr := h.cmd.Wait()
	if !exited {
		// The supervisor died: what it held may run on. Kill it from here,
		// at once (the command's group is held by its members, if any).
		h.killDirect(false)
		h.res.Err = fmt.Errorf("%w died before the command's end was confirmed (%v); its process group and cgroup were killed", ErrSupervisor, werr)
	}
}

// Pid is the command's process id (and its process group id).
func (h *Handle) Pid() int { return h.started.pid }

// SupervisorPid is the supervisor's process id.
func (h *Handle) SupervisorPid() int { return h.cmd.Process.Pid }

// Mode is how the supervisor holds the tree: ModeCgroup, ModeGroup or
// ModeProcess.
func (h *Handle) Mode() string { return h.started.mode }

// Done is closed when the run has ended: the tree is gone.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Wait waits for the run's end and returns how it ended.
func (h *Handle) Wait() Result {
	<-h.done
	return h.res
}

// SetDeadline moves the deadline the supervisor enforces to d (a time on
// this process's monotonic clock, such as a lease's deadline).
func (h *Handle) SetDeadline(d time.Time) error {
	return h.send("D " + strconv.FormatInt(monoOf(d), 10))
}

// Terminate asks the tree to stop: SIGTERM to every process of it, and
// SIGKILL to what remains after grace (at once if grace <= 0).
func (h *Handle) Terminate(grace time.Duration) error {
	if grace <= 0 {
		return h.Kill()
	}
	return h.send("T " + strconv.FormatInt(int64(grace), 10))
}

// Kill kills the whole tree at once. The command's process group and
// cgroup leaf are also killed from here, so that a paused supervisor does
// not hold the kill up.
func (h *Handle) Kill() error {
	err := h.send("K")
	select {
	case <-h.done:
	default:
		h.killDirect(true)
	}
	return err
}

// Signal sends sig to every process of the tree (a signal the caller
// received and forwards).
func (h *Handle) Signal(sig os.Signal) error {
	n, ok := signalNumber(sig)
	if !ok {
		return fmt.Errorf("%w: cannot forward %v", ErrSupervisor, sig)
	}
	return h.send("S " + strconv.Itoa(n))
}

// sendTimeout bounds a control write. A live supervisor reads its pipe at
// once; a full one (64 KiB of extensions, hours of renewals) means it is
// paused, and a write blocking there would hold up the caller's loop —
// its Kill on a lost lease, whose direct kill is what reaches the tree of
// a paused supervisor. A message is one write of less than PIPE_BUF
// bytes, so a timed-out write wrote nothing.
const sendTimeout = 100 * time.Millisecond

func (h *Handle) send(msg string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return os.ErrClosed
	}
	_ = h.ctrl.SetWriteDeadline(time.Now().Add(sendTimeout)) // not pollable (no deadline): the write may block
	_, err := h.ctrl.Write([]byte(msg + "\n"))
	if err != nil && errors.Is(err, syscall.EPIPE) {
		return os.ErrClosed // the supervisor has exited: the run is ending
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: control pipe full for %v (the supervisor is paused): %q not sent", ErrSupervisor, sendTimeout, msg)
	}
	return err
}

func (h *Handle) closeCtrl() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		h.ctrl.Close()
	}
}

// killDirect kills the command's process group and cgroup leaf without
// the supervisor. With held, the group is signalled only while the command
// is still the supervisor's unreaped child: a Kill may come long after the
// supervisor ended the run (a caller paused meanwhile), when the command's
// pid may name another process.
func (h *Handle) killDirect(held bool) {
	if held {
		killPausedTree(h.cmd.Process.Pid) // first: the group's death orphans its members' children
	}
	if h.started.pid > 1 && (!held || leaderHeld(h.cmd.Process.Pid, h.started.pid)) {
		killGroup(h.started.pid)
	}
	if h.started.cgroup != "" {
		killCgroup(h.started.cgroup)
	}
}
