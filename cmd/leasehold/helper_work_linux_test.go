package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// workMain is the "work" helper (a job's long-running work): for
// $LEASEHOLD_TEST_WORK seconds it appends, every 50 ms, a line
// "W token instance pid boottime-ns" to $LEASEHOLD_TEST_LOG — one write
// per line, O_APPEND. The time is CLOCK_BOOTTIME, the clock the SQLite
// backend judges leases by on Linux, so a line can be compared with a
// lease's expiry or grant as the backend recorded it. With
// $LEASEHOLD_TEST_IGNORE_TERM set it ignores SIGTERM.
func workMain() int {
	secs, err := strconv.ParseFloat(os.Getenv("LEASEHOLD_TEST_WORK"), 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "work: LEASEHOLD_TEST_WORK:", err)
		return 2
	}
	if os.Getenv("LEASEHOLD_TEST_IGNORE_TERM") != "" {
		signal.Ignore(syscall.SIGTERM)
	}
	f, err := os.OpenFile(os.Getenv("LEASEHOLD_TEST_LOG"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666)
	if err != nil {
		fmt.Fprintln(os.Stderr, "work:", err)
		return 1
	}
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	for time.Now().Before(end) {
		line := fmt.Sprintf("W %s %s %d %d\n", os.Getenv("LEASEHOLD_TOKEN"), os.Getenv("LEASEHOLD_INSTANCE"), os.Getpid(), bootNs())
		if _, err := f.Write([]byte(line)); err != nil {
			return 1
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0
}

// bootNs reads CLOCK_BOOTTIME.
func bootNs() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// workLine is one line of the work helper.
type workLine struct {
	token    uint64
	instance string
	pid      int
	t        int64 // CLOCK_BOOTTIME ns
}

// readWork reads the work helper's lines.
func readWork(path string) []workLine {
	data, _ := os.ReadFile(path)
	var out []workLine
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) != 5 || f[0] != "W" {
			continue
		}
		tok, _ := strconv.ParseUint(f[1], 10, 64)
		pid, _ := strconv.Atoi(f[3])
		t, _ := strconv.ParseInt(f[4], 10, 64)
		out = append(out, workLine{tok, f[2], pid, t})
	}
	return out
}

// span is the first and last line of one token's work.
type span struct {
	first, last int64
	pids        map[int]bool
	instance    string
}

// spans groups the lines by token.
func spans(ls []workLine) map[uint64]*span {
	out := map[uint64]*span{}
	for _, l := range ls {
		s := out[l.token]
		if s == nil {
			s = &span{first: l.t, last: l.t, pids: map[int]bool{}, instance: l.instance}
			out[l.token] = s
		}
		s.first, s.last = min(s.first, l.t), max(s.last, l.t)
		s.pids[l.pid] = true
	}
	return out
}

// overlaps returns a description of every pair of tokens whose work ran
// at the same time, or "".
func overlaps(ls []workLine) string {
	var b strings.Builder
	sp := spans(ls)
	for a, x := range sp {
		for c, y := range sp {
			if a < c && x.first <= y.last && y.first <= x.last {
				fmt.Fprintf(&b, "token %d's work [%d, %d] (%s) and token %d's [%d, %d] (%s) overlap by %v; ",
					a, x.first, x.last, x.instance, c, y.first, y.last, y.instance, time.Duration(min(x.last, y.last)-max(x.first, y.first)))
			}
		}
	}
	return b.String()
}
