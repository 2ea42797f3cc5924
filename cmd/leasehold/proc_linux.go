package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// childSysProcAttr puts the command in its own process group and has the
// kernel SIGKILL it when the OS thread that started it exits (Pdeathsig),
// which is when leasehold dies, even by SIGKILL: runCommand starts and waits
// for the command from a goroutine locked to its thread.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// becomeSubreaper makes leasehold the reaper of its orphaned descendants
// (PR_SET_CHILD_SUBREAPER): a process the command started whose parent
// died is reparented to leasehold, not to init, so that leasehold can still
// find and kill it before it releases the lock, even if it left the
// command's process group.
func becomeSubreaper() error { return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }

// children returns the pids of this process's children, from
// /proc/self/task/*/children.
func children() []int {
	files, _ := filepath.Glob("/proc/self/task/*/children")
	var out []int
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(s); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}
