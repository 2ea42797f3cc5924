//go:build !unix

package history

// Mono would return a clock every process on the host shares; this system
// has none the harness can read, and the harness refuses to run here
// (see internal/childproc.CanPause), so nothing calls it.
func Mono() int64 { panic("history: no host-wide monotonic clock on this system") }
