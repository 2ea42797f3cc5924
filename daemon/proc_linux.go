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
	err := syscall.Kill(pid, 0)
	if errors.Is(err, syscall.ESRCH) {
		return true, fmt.Sprintf("pid %d no longer exists on this boot", pid)
	}
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false, fmt.Sprintf("cannot tell whether pid %d is alive: %v", pid, err)
	}
	hidden := err != nil // EPERM: the pid exists, another user's
	now, state, err := procStat(pid)
	switch {
	case errors.Is(err, os.ErrNotExist) && hidden:
		// A live process /proc does not show (mounted hidepid=2, systemd
		// ProtectProc=invisible): nothing proves it is gone.
		return false, fmt.Sprintf("pid %d is alive (another user's, hidden from /proc)", pid)
	case errors.Is(err, os.ErrNotExist):
		return true, fmt.Sprintf("pid %d no longer exists on this boot", pid)
	case err != nil:
		return false, fmt.Sprintf("cannot tell whether pid %d is the holder: %v", pid, err)
	case now != start:
		return true, fmt.Sprintf("pid %d is now another process (started at tick %d, the holder at %d)", pid, now, start)
	case state == "Z" || state == "X":
		return true, fmt.Sprintf("pid %d has exited (state %s)", pid, state)
	}
	return false, fmt.Sprintf("pid %d is alive", pid)
}
