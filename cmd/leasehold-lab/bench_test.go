package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestBenchRedis runs "leasehold-lab bench redis" briefly against a real
// redis-server and checks that every section reports figures. It asserts
// no time: the figures are for people.
func TestBenchRedis(t *testing.T) {
	srv := testserver.Redis(t)
	e := newEnv(t)
	r := e.expect(0, "bench", "redis", "--url", "redis://"+srv.Addr()+"/0", "--duration", "80ms",
		"--goroutines", "1,4", "--crowd", "300", "--keys", "10", "--wait", "1s", "--handovers", "3", "--pool-size", "8")
	for _, want := range []string{
		"leasehold Locker             1 ", "leasehold backend            4 ", "floor SET NX PX + DEL        4 ",
		"crowd: 300 goroutines, 10 keys", "errors 0", "push (pub/sub release events)", "poll (library backoff)",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	// Every crowd attempt is accounted for.
	var acq, not, indet, errs int
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "acquired ") {
			if _, err := fmtSscanf(line, &acq, &not, &indet, &errs); err != nil {
				t.Fatalf("crowd line %q: %v", line, err)
			}
		}
	}
	if acq+not+indet+errs != 300 || acq < 10 {
		t.Errorf("crowd outcomes acquired %d + not %d + indeterminate %d + errors %d: want 300 in all and at least one grant per key (10)",
			acq, not, indet, errs)
	}
}

// TestBenchRedisBadFlags: a bad value is a usage error naming the flag.
func TestBenchRedisBadFlags(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--goroutines", "1,x"}, `--goroutines "1,x"`},
		{[]string{"--goroutines", "0"}, `--goroutines "0"`},
		{[]string{"--duration", "-1s"}, "--duration -1s"},
		{[]string{"--keys", "0"}, "--keys 0"},
		{[]string{"--url", "http://x"}, "--url"},
		{[]string{"--pool-size", "0"}, "--pool-size 0"},
	} {
		r := e.expect(ExitUsage, append([]string{"bench", "redis"}, c.args...)...)
		if !strings.Contains(r.stderr, c.want) {
			t.Errorf("bench redis %q: stderr %q does not name %q", c.args, r.stderr, c.want)
		}
	}
}

// fmtSscanf reads the crowd line "acquired A, not acquired N (of which
// never sent S), indeterminate I, errors E".
func fmtSscanf(line string, acq, not, indet, errs *int) (int, error) {
	var sent int
	return fmt.Sscanf(strings.TrimSpace(line), "acquired %d, not acquired %d (of which never sent %d), indeterminate %d, errors %d",
		acq, not, &sent, indet, errs)
}
