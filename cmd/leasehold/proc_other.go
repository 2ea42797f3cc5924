//go:build !linux

package main

import "syscall"

// childSysProcAttr puts the command in its own process group. Outside Linux
// there is no Pdeathsig: if leasehold is killed with SIGKILL the command
// keeps running.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
