package daemon

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// selfProc describes this process (see proc).
func selfProc() (proc, bool) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		return proc{}, false
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return proc{}, false
	}
	start, _, err := procStat(os.Getpid())
	if err != nil {
		return proc{}, false
	}
	var ns syscall.Stat_t // the pid namespace's inode: /proc/self/ns/pid -> "pid:[4026531836]"
	if err := syscall.Stat("/proc/self/ns/pid", &ns); err != nil {
		return proc{}, false
	}
	return proc{host: host, pid: os.Getpid(), start: start, pidns: ns.Ino,
		boot: strings.ReplaceAll(strings.TrimSpace(string(boot)), "-", "")}, true
}

// procStat reads a process's start time (clock ticks since boot) and state
// from /proc/<pid>/stat.
func procStat(pid int) (start uint64, state string, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", err
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, "", fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return 0, "", fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	start, err = strconv.ParseUint(f[19], 10, 64) // field 22 of the whole line
	return start, f[0], err
}

// processGone reports whether the process pid that started at start (on
// this boot) is gone: no such pid (kill(pid, 0) is ESRCH), a pid that is
// now another process (another start time: the pid was reused), or a
// zombie (it exited and holds nothing).
func processGone(pid int, start uint64) (bool, string) {
	kerr := syscall.Kill(pid, 0)
	if kerr != nil && !errors.Is(kerr, syscall.ESRCH) && !errors.Is(kerr, syscall.EPERM) {
		return false, fmt.Sprintf("cannot tell whether pid %d is alive: %v", pid, kerr)
	}
	var (
		now   uint64
		state string
		serr  error
	)
	if kerr == nil || errors.Is(kerr, syscall.EPERM) {
		now, state, serr = procStat(pid)
	}
	return judgeGone(pid, start, kerr, now, state, serr)
}

// judgeGone decides from kill(pid, 0)'s error and /proc/<pid>/stat (its
// start ticks and state, or the error reading it) whether the holder that
// started at tick start is provably gone.
func judgeGone(pid int, start uint64, kerr error, now uint64, state string, serr error) (bool, string) {
	switch {
	case errors.Is(kerr, syscall.ESRCH):
		return true, fmt.Sprintf("pid %d no longer exists on this boot", pid)
	case errors.Is(serr, os.ErrNotExist) && kerr != nil:
		// EPERM said it exists (another user's); /proc does not show it
		// (mounted hidepid=2, systemd ProtectProc=invisible): nothing
		// proves it gone.
		return false, fmt.Sprintf("pid %d is alive (another user's, hidden from /proc)", pid)
	case errors.Is(serr, os.ErrNotExist):
		return true, fmt.Sprintf("pid %d no longer exists on this boot", pid)
	case serr != nil:
		return false, fmt.Sprintf("cannot tell whether pid %d is the holder: %v", pid, serr)
	case now != start:
		return true, fmt.Sprintf("pid %d is now another process (started at tick %d, the holder at %d)", pid, now, start)
	case state == "Z" || state == "X":
		return true, fmt.Sprintf("pid %d has exited (state %s)", pid, state)
	}
	return false, fmt.Sprintf("pid %d is alive", pid)
}
