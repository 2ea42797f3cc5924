//go:build linux

package sqlite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasehold/leasehold/backend"
)

// Environment of a helper process started by TestMultiProcessExclusion.
const (
	envRole    = "LEASEHOLD_SQLITE_HELPER" // "worker" selects the role
	envDB      = "LEASEHOLD_SQLITE_DB"
	envLog     = "LEASEHOLD_SQLITE_LOG"
	envCycles  = "LEASEHOLD_SQLITE_CYCLES"
	envStartAt = "LEASEHOLD_SQLITE_START_AT" // opener: Unix ns to open at
)

// runHelpers runs n processes of TestHelperProcess with env added, waits
// for them all, and fails t for each that failed, with what it printed.
func runHelpers(ctx context.Context, t *testing.T, label string, n int, env ...string) {
	t.Helper()
	cmds := make([]*exec.Cmd, n)
	outs := make([]*strings.Builder, n)
	for i := range cmds {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), env...)
		outs[i] = &strings.Builder{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s %d: %v", label, i, err)
		}
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("%s %d: %v\n%s", label, i, err, outs[i])
		}
	}
}

const (
	mpProcesses = 4
	mpCycles    = 500
	mpKey       = "mp/lock"
)

// monotonicNs reads CLOCK_MONOTONIC, which every process on the host shares.
func monotonicNs() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// TestHelperProcess is the body of one worker process; it does nothing
// unless started by TestMultiProcessExclusion.
func TestHelperProcess(t *testing.T) {
	switch os.Getenv(envRole) {
	case "opener":
		<-time.After(time.Until(time.Unix(0, mustAtoi(t, os.Getenv(envStartAt)))))
		b, err := Open(context.Background(), os.Getenv(envDB))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		return
	case "worker":
	default:
		t.Skip("helper process for TestMultiProcessExclusion")
	}
	cycles, err := strconv.Atoi(os.Getenv(envCycles))
	if err != nil {
		t.Fatalf("%s: %v", envCycles, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := Open(ctx, os.Getenv(envDB))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer b.Close()
	log, err := os.OpenFile(os.Getenv(envLog), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("open log: %v", err)
	}
	defer log.Close()
	pid := os.Getpid()
	owner := backend.Owner{Instance: "pid-" + strconv.Itoa(pid)}
	for range cycles {
		owner.Nonce = backend.NewNonce()
		var g backend.Grant
		for {
			g, err = b.Acquire(ctx, mpKey, owner, 30*time.Second)
			if err == nil {
				break
			}
			if !errors.Is(err, backend.ErrLeaseHeld) {
				t.Fatalf("Acquire: %v", err)
			}
			time.Sleep(time.Duration(50+rand.IntN(200)) * time.Microsecond) // retry backoff
		}
		start := monotonicNs()
		end := monotonicNs()
		line := fmt.Sprintf("%d %d %d %d\n", g.Token, pid, start, end)
		if _, err := log.WriteString(line); err != nil {
			t.Fatalf("write log: %v", err)
		}
		if err := b.Release(ctx, mpKey, owner, g.Token); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
}

// TestMultiProcessExclusion runs mpProcesses OS processes that each do
// mpCycles acquire → append a line → release cycles on one database file,
// then checks from the shared log that no two holds overlapped in time and
// that tokens strictly increased in the order the lines were written.
func TestMultiProcessExclusion(t *testing.T) {
	if os.Getenv(envRole) != "" {
		t.Skip("inside a helper process")
	}
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	dir := t.TempDir()
	db, logPath := filepath.Join(dir, "mp.db"), filepath.Join(dir, "holds.log")
	// Create the schema once, as a deployment's first process would.
	b, err := Open(context.Background(), db)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runHelpers(ctx, t, "helper", mpProcesses, envRole+"=worker", envDB+"="+db, envLog+"="+logPath, envCycles+"="+strconv.Itoa(mpCycles))
	if t.Failed() {
		return
	}
	checkHoldLog(t, logPath, mpProcesses*mpCycles, mpProcesses)
}

type hold struct {
	token      uint64
	pid        int
	start, end int64
}

func checkHoldLog(t *testing.T, path string, wantLines, wantPids int) {
	t.Helper()
	summary, err := verifyHolds(path, wantLines, wantPids)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(summary)
}

// verifyHolds checks a log of holds: wantLines lines from wantPids
// processes, tokens strictly increasing in log order, and no two [start,end]
// intervals overlapping.
func verifyHolds(path string, wantLines, wantPids int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var holds []hold
	pids := map[int]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var h hold
		if _, err := fmt.Sscanf(sc.Text(), "%d %d %d %d", &h.token, &h.pid, &h.start, &h.end); err != nil {
			return "", fmt.Errorf("line %d %q: %v", len(holds)+1, sc.Text(), err)
		}
		if h.end < h.start {
			return "", fmt.Errorf("line %d: end before start", len(holds)+1)
		}
		holds = append(holds, h)
		pids[h.pid]++
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if len(holds) != wantLines {
		return "", fmt.Errorf("%d lines in the log, want %d", len(holds), wantLines)
	}
	if len(pids) != wantPids {
		return "", fmt.Errorf("lines from %d processes, want %d: %v", len(pids), wantPids, pids)
	}
	for i := 1; i < len(holds); i++ {
		if holds[i].token <= holds[i-1].token {
			return "", fmt.Errorf("line %d: token %d after %d (pid %d after pid %d)", i+1, holds[i].token, holds[i-1].token, holds[i].pid, holds[i-1].pid)
		}
	}
	byStart := append([]hold(nil), holds...)
	sort.Slice(byStart, func(i, j int) bool { return byStart[i].start < byStart[j].start })
	for i := 1; i < len(byStart); i++ {
		p, c := byStart[i-1], byStart[i]
		if c.start <= p.end {
			return "", fmt.Errorf("holds overlap: token %d pid %d [%d,%d] and token %d pid %d [%d,%d]",
				p.token, p.pid, p.start, p.end, c.token, c.pid, c.start, c.end)
		}
	}
	return fmt.Sprintf("%d holds by %d processes, tokens %d..%d, no overlap", len(holds), len(pids), holds[0].token, holds[len(holds)-1].token), nil
}

// TestVerifyHoldsFlagsViolations is the negative control of the checker:
// an overlap or a token that does not increase must be reported.
func TestVerifyHoldsFlagsViolations(t *testing.T) {
	cases := map[string]struct {
		log  string
		fail bool
	}{
		"good":          {"1 10 100 110\n2 11 120 130\n3 10 140 150\n", false},
		"overlap":       {"1 10 100 125\n2 11 120 130\n3 10 140 150\n", true},
		"touching":      {"1 10 100 120\n2 11 120 130\n3 10 140 150\n", true},
		"token repeats": {"1 10 100 110\n1 11 120 130\n3 10 140 150\n", true},
		"token falls":   {"2 10 100 110\n1 11 120 130\n3 10 140 150\n", true},
		"line missing":  {"1 10 100 110\n2 11 120 130\n", true},
	}
	for name, c := range cases {
		p := filepath.Join(t.TempDir(), "log")
		if err := os.WriteFile(p, []byte(c.log), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := verifyHolds(p, 3, 2)
		if (err != nil) != c.fail {
			t.Errorf("%s: verifyHolds error %v, want failure %v", name, err, c.fail)
		}
	}
}

func mustAtoi(t *testing.T, s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestConcurrentOpensOfANewFile: daemons started together on one new file
// all open it (CI saw one of three exit with "database is locked"). Turning
// a new file to WAL needs an exclusive lock that SQLite's busy handler does
// not wait for when the openers already hold shared locks (it would
// deadlock), so Open retries that step itself within the busy timeout.
func TestConcurrentOpensOfANewFile(t *testing.T) {
	if os.Getenv(envRole) != "" {
		t.Skip("inside a helper process")
	}
	const n = 8
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for round := range 10 {
		db := filepath.Join(t.TempDir(), "new.db")
		at := time.Now().Add(500 * time.Millisecond).UnixNano() // all start together
		runHelpers(ctx, t, fmt.Sprintf("round %d, opener", round), n, envRole+"=opener", envDB+"="+db, envStartAt+"="+strconv.FormatInt(at, 10))
	}
}
