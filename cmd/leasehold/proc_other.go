//go:build !linux

package main

import "syscall"

// childSysProcAttr puts the command in its own process group. Outside Linux
// there is no Pdeathsig: if leasehold is killed with SIGKILL the command is
// killed by the watchdog (see watchdog.go), with its process group.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// becomeSubreaper: no child subreapers outside Linux.
func becomeSubreaper() error { return nil }

// children: not known outside Linux.
func children() []int { return nil }
