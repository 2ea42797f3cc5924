package main

import "syscall"

// childSysProcAttr puts the command in its own process group and has the
// kernel SIGKILL it when the OS thread that started it exits (Pdeathsig),
// which is when leasehold dies, even by SIGKILL: runCommand starts and waits
// for the command from a goroutine locked to its thread.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
