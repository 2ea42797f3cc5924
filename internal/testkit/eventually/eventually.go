// Package eventually is the tests' one way to wait for a condition: poll
// it, quickly at first and then every 20 ms, until it holds or a deadline
// passes, and fail the test naming what did not happen. A wait on a
// condition with a deadline, never a sleep that hopes.
//
// It imports testing, so only tests may import it (cmd/leasehold's
// TestBinaryLinksNoLab keeps it, and all of internal/testkit, out of the
// binary).
package eventually

import (
	"testing"
	"time"
)

// maxPoll is the longest pause between two polls.
const maxPoll = 20 * time.Millisecond

// True waits up to within for cond to return true, and fails t with
// "what: not true within D" if it does not.
func True(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(within, cond) {
		t.Fatalf("%s: not true within %v", what, within)
	}
}

// Within waits up to within for cond to return true and reports whether it
// did (for a caller that fails in its own words).
func Within(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	pause := time.Millisecond
	for !cond() {
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(min(pause, time.Until(deadline)+time.Millisecond))
		pause = min(2*pause, maxPoll)
	}
	return true
}
