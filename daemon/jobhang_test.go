//go:build unix

package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCommandWithDetachedGrandchildReturns (issue 15 item 3): a command
// that leaves a grandchild in a session of its own (setsid, out of reach
// of the process-group kill) holding its output pipe kept the run open as
// long as the grandchild lived (no cmd.WaitDelay). A command job must end
// within its kill grace plus a bounded wait for its output, whether it
// exits by itself or is stopped by its context, and the group kill must
// not leave the command's own process group running.
func TestCommandWithDetachedGrandchildReturns(t *testing.T) {
	for _, c := range []struct {
		name    string
		script  string
		timeout time.Duration
	}{
		{"exits at once", `setsid sleep 30 & echo "$!" > "$PIDS"; echo started`, 0},
		{"stopped by its timeout", `setsid sleep 30 & echo "$!" > "$PIDS"; echo started; sleep 30`, 500 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			pids := filepath.Join(t.TempDir(), "pids")
			j := &JobConfig{Name: "hang", Command: &CommandJob{Argv: []string{"sh", "-c", c.script}, Env: map[string]string{"PIDS": pids}}}
			ctx := context.Background()
			if c.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.timeout)
				defer cancel()
			}
			t.Cleanup(func() { // the detached grandchild is the test's to kill
				if b, err := os.ReadFile(pids); err == nil {
					if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			})
			start := time.Now()
			done := make(chan error, 1)
			go func() { done <- commandFunc(j, "i", nil, nil)(ctx, run) }()
			bound := c.timeout + killGrace + outputWait + 5*time.Second
			select {
			case err := <-done:
				t.Logf("returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
				if c.timeout == 0 && err != nil {
					t.Errorf("the command exited 0, its leftover process only held the output: %v, want success", err)
				}
				if c.timeout > 0 && err == nil {
					t.Errorf("stopped by its timeout, the run reports success")
				}
			case <-time.After(bound):
				t.Fatalf("the command job was still open %v after it started: a detached grandchild holding its output pipe keeps it open", bound)
			}
		})
	}
}
