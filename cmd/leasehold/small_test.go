package main

import (
	"strings"
	"testing"
)

// TestTinyTTLIsUsageError (issue 18 item 9): a --ttl too short for a lease
// to outlive the command's start is a usage error (64) naming the flag,
// the value and the minimum — not a lease lost (76).
func TestTinyTTLIsUsageError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, ttl := range []string{"1ms", "99ms"} {
		r := e.expect(ExitUsage, "lock", "--ttl", ttl, "k", "--", "true")
		if !strings.Contains(r.stderr, `--ttl "`+ttl+`"`) || !strings.Contains(r.stderr, "at least 100ms") {
			t.Errorf("--ttl %s: stderr %q", ttl, r.stderr)
		}
	}
	e.expect(0, "lock", "--ttl", "100ms", "k", "--", "true")
}
