//go:build !unix

package admin

// openFileLimit: no RLIMIT_NOFILE here; assume 1024.
func openFileLimit() int { return 1024 }
