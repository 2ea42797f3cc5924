package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/internal/childproc"
)

// watchdogArg, as the only argument, runs leasehold as the watchdog of a
// "leasehold lock": see startWatchdog.
const watchdogArg = "__leasehold-lock-watchdog"

// watchdog is a helper process that outlives a "leasehold lock" killed
// with SIGKILL and then kills the command's whole process group at once —
// the command's children included, which Pdeathsig does not reach — long
// before the lease can expire and another holder start. It reads process
// group ids from a pipe whose only write end is leasehold's: end of file
// means leasehold is gone (or done).
type watchdog struct {
	w   *os.File
	cmd *exec.Cmd
}

func startWatchdog() (*watchdog, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	cmd := exec.Command(exe, watchdogArg)
	cmd.ExtraFiles = []*os.File{r} // fd 3; nothing else of leasehold's
	// Its own process group: a signal to leasehold's group (Ctrl-C, or
	// kill -9 of the job) does not take the watchdog along.
	childproc.Prepare(cmd, childproc.Options{Group: true})
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	r.Close()
	return &watchdog{w: w, cmd: cmd}, nil
}

// watch has the watchdog kill process group pgid when leasehold dies.
func (wd *watchdog) watch(pgid int) error {
	_, err := fmt.Fprintf(wd.w, "%d\n", pgid)
	return err
}

// pid is the watchdog's process id.
func (wd *watchdog) pid() int { return wd.cmd.Process.Pid }

// stop ends the watchdog (it kills the groups it watches, which are gone
// by then) and waits for it briefly.
func (wd *watchdog) stop() {
	wd.w.Close()
	done := make(chan struct{})
	go func() { _ = wd.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
}

// watchdogMain is the watchdog process: it collects process group ids
// from fd 3 until end of file, then sends each group SIGKILL.
func watchdogMain() int {
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	in := os.NewFile(3, "watchdog")
	if in == nil {
		return 2
	}
	var groups []int
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if pgid, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil && pgid > 1 {
			groups = append(groups, pgid)
		}
	}
	for _, g := range groups {
		_ = childproc.SignalGroup(g, os.Kill)
	}
	return 0
}
