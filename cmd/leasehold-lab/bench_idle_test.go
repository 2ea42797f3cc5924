package main

import (
	"os"
	"strings"
	"testing"
)

func TestParseCounts(t *testing.T) {
	got, err := parseCounts("100, 1000,10000")
	if err != nil || len(got) != 3 || got[0] != 100 || got[1] != 1000 || got[2] != 10000 {
		t.Fatalf("parseCounts: %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "-1", "10,x", "100001"} {
		if _, err := parseCounts(bad); err == nil {
			t.Errorf("parseCounts(%q) accepted", bad)
		}
	}
}

// The /proc readers parse this process's own entries.
func TestProcReaders(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system")
	}
	before, err := cpuTicks(os.Getpid())
	if err != nil || before < 0 {
		t.Fatalf("cpuTicks: %d, %v", before, err)
	}
	after, err := cpuTicks(os.Getpid())
	if err != nil || after < before {
		t.Fatalf("cpuTicks went from %d to %d (%v)", before, after, err)
	}
	st, err := procStatus(os.Getpid())
	if err != nil || st["VmRSS"] <= 0 || st["VmHWM"] < st["VmRSS"] || st["Threads"] < 1 {
		t.Fatalf("procStatus: VmRSS %d VmHWM %d Threads %d, %v", st["VmRSS"], st["VmHWM"], st["Threads"], err)
	}
}

// TestLeaseholdFlag: a --leasehold binary that does not exist is a usage
// error naming the flag, before any daemon starts.
func TestLeaseholdFlag(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("bench idle needs /proc")
	}
	e := newEnv(t)
	missing := e.path("no-such-leasehold")
	r := e.expect(ExitUsage, "--leasehold", missing, "bench", "idle", "--jobs", "1", "--duration", "1s")
	if !strings.Contains(r.stderr, "--leasehold") || !strings.Contains(r.stderr, missing) {
		t.Errorf("stderr %q does not name --leasehold and %s", r.stderr, missing)
	}
}
