package supervisor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// exitStatus is how the command's process ended.
type exitStatus struct{ code, signal int }

// tree is the command's processes, held the way this system can.
type tree interface {
	mode() string
	cgroup() string // the cgroup leaf's path, or ""
	pid() int
	// exited receives the command's own exit once.
	exited() <-chan exitStatus
	// childless is closed once the supervisor has no child process left.
	childless() <-chan struct{}
	// signal sends sig to every process of the tree.
	signal(sig int)
	// kill sends SIGKILL to every process of the tree.
	kill()
	// running counts the processes of the tree still running.
	running() int
	// empty reports whether no process of the tree remains (asked once
	// childless is closed).
	empty() bool
	// release frees what holding the tree took (the cgroup leaf).
	release()
}

// pollEvery is how often a supervisor that is killing its tree sends
// SIGKILL again (to what was forked meanwhile) and checks it is gone.
const pollEvery = 10 * time.Millisecond

// Main is the supervisor process: fd 3 is its control pipe (the Spec line,
// then commands; end of file means the caller is gone), fd 4 its status
// pipe. It returns the process's exit code.
func Main() int {
	runtime.LockOSThread() // the command's Pdeathsig follows the thread that forked it
	// Signals are for the caller to decide: a Ctrl-C or a SIGTERM meant
	// for the caller's service reaches the supervisor too, and the caller
	// then tells it what to do. Notify (not Ignore) so the command does
	// not inherit them ignored.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, ignoredSignals...)
	go func() {
		for range sigs {
		}
	}()
	ctrl, status := os.NewFile(3, "control"), os.NewFile(4, "status")
	if ctrl == nil || status == nil {
		fmt.Fprintln(os.Stderr, "leasehold supervisor: no control pipes")
		return 2
	}
	report := func(format string, args ...any) { _, _ = fmt.Fprintf(status, format+"\n", args...) }
	report("ready")
	in := bufio.NewReader(ctrl)
	line, err := in.ReadString('\n')
	var w wire
	if err == nil {
		err = json.Unmarshal([]byte(line), &w)
	}
	if err != nil || len(w.Argv) == 0 {
		report("error bad spec: %v", err)
		return 2
	}
	closeInherited()
	t, err := startTree(w)
	if err != nil {
		kind := "error"
		if errors.Is(err, os.ErrNotExist) {
			kind = "notfound"
		}
		report("%s %s: %v", kind, w.Path, err)
		return 1
	}
	report("started %d %s %s", t.pid(), t.mode(), t.cgroup())
	st, left, killed := supervise(t, in, w)
	t.release()
	if killed != "" {
		report("killed %s", killed)
	}
	report("exit %d %d %d", st.code, st.signal, left)
	return 0
}

// msg is one control message.
type msg struct {
	kind byte
	arg  int64
}

// malformed is the kind readControl gives a message whose argument is not
// a number; supervise kills the tree on it, as on any kind it does not know.
const malformed = '?'

// readControl delivers control messages until end of file (closes out).
func readControl(in *bufio.Reader, out chan<- msg) {
	defer close(out)
	for {
		line, err := in.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		m := msg{kind: line[0]}
		if len(line) > 2 {
			arg, err := strconv.ParseInt(line[2:], 10, 64)
			if err != nil {
				m.kind = malformed
			}
			m.arg = arg
		}
		out <- m
	}
}

// supervise runs the tree to its end: it returns the command's exit, how
// many processes the command left running, and why the supervisor killed
// the tree ("" if it did not on its own).
func supervise(t tree, in *bufio.Reader, w wire) (st exitStatus, leftovers int, killed string) {
	msgs := make(chan msg, 16)
	go readControl(in, msgs)
	var (
		deadline  = time.NewTimer(time.Hour)
		grace     *time.Timer
		graceC    <-chan time.Time
		tick      *time.Ticker
		tickC     <-chan time.Time
		exited    = t.exited()
		childless = t.childless()
		stopping  bool
		gotExit   bool
		killing   bool
	)
	deadline.Stop()
	defer deadline.Stop()
	killNow := func(why string) {
		if !killing {
			killing = true
			if killed == "" && why != "" {
				killed = why
			}
			tick = time.NewTicker(pollEvery)
			tickC = tick.C
		}
		t.kill()
	}
	defer func() {
		if tick != nil {
			tick.Stop()
		}
		if grace != nil {
			grace.Stop()
		}
	}()
	setDeadline := func(at int64) {
		deadline.Stop()
		if at == 0 {
			return
		}
		left := time.Duration(at - monoNow())
		switch {
		case left <= 0:
			killNow("the lease deadline passed without an extension")
		case w.MaxAhead > 0 && left > time.Duration(w.MaxAhead):
			killNow(fmt.Sprintf("a deadline %v ahead was refused (more than the lease's %v)", left, time.Duration(w.MaxAhead)))
		default:
			deadline.Reset(left)
		}
	}
	setDeadline(w.Deadline)
	for {
		if gotExit && childless == nil && t.empty() {
			return st, leftovers, killed
		}
		select {
		case m, ok := <-msgs:
			if !ok {
				msgs = nil
				if !(gotExit && childless == nil) {
					killNow("the control pipe closed: leasehold is gone")
				}
				continue
			}
			switch m.kind {
			case 'D':
				switch {
				case m.arg <= 0:
					// leasehold never sends one: a message with no
					// instant must not turn the deadline off.
					killNow("a deadline message with no instant")
				case !killing:
					setDeadline(m.arg)
				}
			case 'T':
				if !stopping && !killing {
					stopping = true
					t.signal(sigTerm)
					grace = time.NewTimer(time.Duration(m.arg))
					graceC = grace.C
				}
			case 'K':
				killNow("")
			case 'S':
				t.signal(int(m.arg))
			default:
				killNow(fmt.Sprintf("a malformed control message (%q)", m.kind))
			}
		case <-deadline.C:
			killNow("the lease deadline passed without an extension")
		case <-graceC:
			graceC = nil
			killNow("")
		case st = <-exited:
			gotExit, exited = true, nil
			if !stopping && !killing {
				if n := t.running(); n > 0 {
					leftovers = n
					killNow("")
				}
			}
		case <-childless:
			childless = nil
			if !t.empty() && !killing {
				// Only members out of the supervisor's reach (no subreaper)
				// remain: they are leftovers.
				leftovers = max(leftovers, 1)
				killNow("")
			}
		case <-tickC:
			t.kill()
		}
	}
}
