//go:build !linux

package daemon

// selfProc: no boot id to tell one boot from the next on this system, so
// a holder is never proven gone and a restart waits for its lease.
func selfProc() (proc, bool) { return proc{}, false }

func processGone(int, uint64) (bool, string) {
	return false, "this system cannot tell whether another process is alive"
}
