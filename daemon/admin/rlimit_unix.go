//go:build unix

package admin

import "syscall"

// openFileLimit is the process's soft RLIMIT_NOFILE (1024 if unknown).
func openFileLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == 0 {
		return 1024
	}
	return int(min(r.Cur, 1<<20))
}
