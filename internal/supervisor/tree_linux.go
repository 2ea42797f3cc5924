package supervisor

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// hasSubreaper: every descendant of the command stays the supervisor's.
const hasSubreaper = true

// becomeSubreaper makes the supervisor the reaper of the command's
// orphaned descendants: one whose parent died is reparented here, not to
// init, even if it left the command's process group or session.
func becomeSubreaper() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }

// closeRange marks every descriptor above stderr close-on-exec at once
// (Linux 5.11); false if the kernel cannot.
func closeRange() bool {
	return unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil
}

// forkExec starts the command in a process group of its own, SIGKILLed by
// the kernel if the supervisor dies (Pdeathsig), and — with cg — born in
// the cgroup leaf (clone3 CLONE_INTO_CGROUP: it cannot fork before it is
// in).
func forkExec(path string, argv []string, attr *syscall.ProcAttr, cg *cgroupLeaf) (int, error) {
	sys := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cg != nil {
		sys.UseCgroupFD, sys.CgroupFD = true, cg.fd
	}
	attr.Sys = sys
	return syscall.ForkExec(path, argv, attr)
}

// descendants returns the pids of every descendant of this process, from
// /proc/PID/task/*/children, breadth first.
func descendants() []int { return descendantsOf("self") }

// descendantsOf returns the pids of every descendant of the process root
// ("self" or a pid), breadth first.
func descendantsOf(root string) []int {
	var out []int
	queue := []string{root}
	for len(queue) > 0 && len(out) < 1<<16 {
		p := queue[0]
		queue = queue[1:]
		files, _ := filepath.Glob("/proc/" + p + "/task/*/children")
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, s := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(s); err == nil {
					out = append(out, pid)
					queue = append(queue, s)
				}
			}
		}
	}
	return out
}

// cgroupLeaf is a cgroup v2 directory holding the command's tree alone.
type cgroupLeaf struct {
	path string
	fd   int
}

// newCgroupLeaf creates a leaf under the supervisor's own cgroup v2
// cgroup, or returns nil when there is none it may create (no cgroup v2
// mount, not writable).
func newCgroupLeaf() *cgroupLeaf {
	mount := cgroup2Mount()
	if mount == "" {
		return nil
	}
	own := ownCgroup()
	if own == "" {
		return nil
	}
	dir := filepath.Join(mount, own, "leasehold-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil
	}
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil
	}
	return &cgroupLeaf{path: dir, fd: fd}
}

// cgroup2Mount is where the cgroup v2 hierarchy is mounted
// (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host), or "".
func cgroup2Mount() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint options... - fstype source ...
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		if f := strings.Fields(pre); len(f) >= 5 {
			return f[4]
		}
	}
	return ""
}

// ownCgroup is this process's cgroup v2 path ("0::/path" in
// /proc/self/cgroup), or "".
func ownCgroup() string {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	return ""
}

// procs lists the leaf's processes.
func (c *cgroupLeaf) procs() []int { return cgroupProcs(c.path) }

func cgroupProcs(dir string) []int {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, s := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(s); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// kill SIGKILLs every process of the leaf: cgroup.kill (Linux 5.14), else
// each pid in cgroup.procs.
func (c *cgroupLeaf) kill() { killCgroupOnce(c.path) }

func killCgroupOnce(dir string) {
	if os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0) == nil {
		return
	}
	for _, pid := range cgroupProcs(dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// remove removes the (empty) leaf.
func (c *cgroupLeaf) remove() {
	_ = unix.Close(c.fd)
	_ = os.Remove(c.path)
}

// killCgroup kills a leaf whose supervisor died, waits briefly for it to
// empty and removes it.
func killCgroup(dir string) {
	if !strings.Contains(filepath.Base(dir), "leasehold-") {
		return
	}
	for range 100 {
		killCgroupOnce(dir)
		if len(cgroupProcs(dir)) == 0 {
			_ = os.Remove(dir)
			return
		}
		time.Sleep(pollEvery)
	}
}

// KillModeFor says which kill mode a supervisor started by this process
// would use, and why, for "leasehold doctor".
func KillModeFor() (mode, why string) {
	if os.Getenv(ModeEnv) == ModeGroup {
		return ModeGroup, ModeEnv + "=" + ModeGroup + " is set; process group + subreaper"
	}
	c := newCgroupLeaf()
	if c == nil {
		return ModeGroup, "no writable cgroup v2 hierarchy here: process group + subreaper (a descendant whose supervisor is killed may survive)"
	}
	c.remove()
	return ModeCgroup, "a cgroup v2 leaf under " + filepath.Dir(c.path) + ", and the subreaper"
}

// leaderHeld reports whether pid is alive (or a zombie) as a child of
// supervisor: then its pid, and so its process group id, cannot have been
// reused.
func leaderHeld(supervisor, pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(s[i+1:]) // state ppid ...
	return len(f) >= 2 && f[1] == strconv.Itoa(supervisor)
}

// killPausedTree SIGKILLs every descendant of supervisor while it is a
// live (not exited) child of this process, for the case it is stopped
// (SIGSTOP, a tracer — or about to be: a stop is delivered asynchronously,
// so the state is not required). The orphans of the command's tree — one
// that left its process group by setsid included — are the supervisor's
// children (it is their subreaper) even while it is stopped, and a stopped
// supervisor reaps none of them, so their pids are held; a running one is
// killing the same tree. An exited supervisor is not walked (its pid may
// be reused).
func killPausedTree(supervisor int) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(supervisor) + "/stat")
	if err != nil {
		return
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return
	}
	f := strings.Fields(s[i+1:]) // state ppid ...
	if len(f) < 2 || f[0] == "Z" || f[0] == "X" || f[1] != strconv.Itoa(os.Getpid()) {
		return
	}
	for _, pid := range descendantsOf(strconv.Itoa(supervisor)) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}
