//go:build unix && !linux

package supervisor

import "syscall"

// No subreaper outside Linux: an orphan that left the command's process
// group is reparented to init, out of reach.
const hasSubreaper = false

func becomeSubreaper() {}

// leaderHeld reports whether pid still leads its own process group (the
// parent is not checked here).
func leaderHeld(_, pid int) bool {
	pg, err := syscall.Getpgid(pid)
	return err == nil && pg == pid
}

func closeRange() bool { return false }

// forkExec starts the command in a process group of its own (no
// Pdeathsig here).
func forkExec(path string, argv []string, attr *syscall.ProcAttr, _ *cgroupLeaf) (int, error) {
	attr.Sys = &syscall.SysProcAttr{Setpgid: true}
	return syscall.ForkExec(path, argv, attr)
}

// descendants: not known here; the process group is what is reached.
func descendants() []int { return nil }

// cgroupLeaf: no cgroups here.
type cgroupLeaf struct{ path string }

func newCgroupLeaf() *cgroupLeaf   { return nil }
func (c *cgroupLeaf) procs() []int { return nil }
func (c *cgroupLeaf) kill()        {}
func (c *cgroupLeaf) remove()      {}
func killCgroup(string)            {}

// KillModeFor says which kill mode a supervisor started by this process
// would use, and why, for "leasehold doctor".
func KillModeFor() (mode, why string) {
	return ModeGroup, "process group only (no subreaper or cgroups on this system: a descendant that calls setsid escapes)"
}

// killPausedTree: no subreaper here; the process group is what is reached.
func killPausedTree(int) {}
