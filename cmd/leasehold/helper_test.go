package main

import (
	"fmt"
	"os"
	"time"

	"github.com/leasehold/leasehold/internal/chaos/history"
)

// helperMain runs when the test binary is started with $LEASEHOLD_TEST_HELPER
// set, as the command under a lock. "append" appends a start line and an
// end line, "S|E token pid monotonic-ns", to $LEASEHOLD_TEST_LOG, with a
// pause between them: if two holders ever overlapped, their lines would
// interleave and their intervals would intersect. Timestamps come from
// CLOCK_MONOTONIC, which every process on the host shares and which no
// wall-clock step moves.
func helperMain() int {
	if os.Getenv(helperEnv) == "work" {
		return workMain()
	}
	if os.Getenv(helperEnv) != "append" {
		fmt.Fprintf(os.Stderr, "helper: unknown %s=%q\n", helperEnv, os.Getenv(helperEnv))
		return 2
	}
	logPath := os.Getenv("LEASEHOLD_TEST_LOG")
	token := os.Getenv("LEASEHOLD_TOKEN")
	appendLine := func(kind string) error {
		f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		// One write per line: O_APPEND makes each write land at the end.
		_, err = fmt.Fprintf(f, "%s %s %d %d\n", kind, token, os.Getpid(), history.Mono())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	if err := appendLine("S"); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	time.Sleep(2 * time.Millisecond) // widen the critical section
	if err := appendLine("E"); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}
