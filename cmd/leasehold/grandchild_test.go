package main

import (
	"fmt"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSigkilledLockKillsGrandchildren (issue 18 item 8): when "leasehold
// lock" is killed with SIGKILL, the command's own children die too — long
// before the lease expires and another holder may start — not only the
// command (Pdeathsig reaches that one alone): the command's supervisor sees
// its control pipe close and kills the whole tree.
func TestSigkilledLockKillsGrandchildren(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ready, gcFile := e.path("ready"), e.path("grandchild")
	// The command starts a background grandchild, records its pid, then waits.
	script := `sleep 300 & echo $! > "$1.tmp" && mv "$1.tmp" "$1"; ` + holderScript("wait")
	holder := e.start("lock", "--ttl", "20s", "k", "--", "sh", "-c", script, ready, gcFile)
	_, pid := readReady(t, holder, ready)
	var gc int
	eventually.True(t, 20*time.Second, "the grandchild's pid", func() bool {
		data, err := os.ReadFile(gcFile)
		if err != nil {
			return false
		}
		gc, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	})
	if !alive(pid) || !alive(gc) {
		t.Fatalf("command %d or grandchild %d not running", pid, gc)
	}
	if err := holder.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	holder.wait(t, 20*time.Second)
	// Well within the 20 s lease: nobody else could hold the key yet.
	eventually.True(t, 10*time.Second, fmt.Sprintf("grandchild %d to die after leasehold was killed", gc), func() bool { return !alive(gc) })
	eventually.True(t, 10*time.Second, fmt.Sprintf("command %d to die", pid), func() bool { return !alive(pid) })
}

// TestLockKillsLeftoversBeforeRelease: background processes the command
// leaves running are killed when it exits, before the lock is released, so
// nothing of a holder runs once the next holder can start.
func TestLockKillsLeftoversBeforeRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gcFile := e.path("grandchild")
	// In the command's group, and escaped from it with setsid (reparented
	// to leasehold, the subreaper, when the command exits).
	for _, bg := range []string{"sleep 300", "setsid sleep 300"} {
		e.expect(0, "lock", "k", "--", "sh", "-c", bg+` >/dev/null 2>&1 & echo $! > "$0"`, gcFile)
		data, err := os.ReadFile(gcFile)
		if err != nil {
			t.Fatal(err)
		}
		gc, _ := strconv.Atoi(strings.TrimSpace(string(data)))
		eventually.True(t, 10*time.Second, fmt.Sprintf("leftover %d (%s) to die", gc, bg), func() bool { return !alive(gc) })
	}
}
