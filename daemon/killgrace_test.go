//go:build unix

package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
	"github.com/leasehold/leasehold/schedule"
)

// A command that ignores SIGTERM: sh sets the signal ignored and execs
// sleep, which keeps it ignored; one process, the leader of its group.
const stubborn = `trap "" TERM; echo "$$" > "$PIDS"; exec sleep 30`

// alive reports whether pid runs (a zombie, dead and not yet reaped, does
// not).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// TestKillGraceEndsBeforeLease (issue 15 item 2): a command that ignores
// SIGTERM after its timeout got 5 s before SIGKILL whatever the job's
// lease: with a lease of 3 s, it outlived what the lease could promise.
// The grace is at most a third of the lease TTL; the process is gone when
// the job returns.
func TestKillGraceEndsBeforeLease(t *testing.T) {
	pids := filepath.Join(t.TempDir(), "pid")
	const ttl, timeout = 3 * time.Second, 200 * time.Millisecond
	j := &JobConfig{Name: "stubborn", LeaseTTL: Duration(ttl), Command: &CommandJob{Argv: []string{"sh", "-c", stubborn}, Env: map[string]string{"PIDS": pids}}}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- commandFunc(j, "i", nil, nil)(ctx, run) }()
	t.Cleanup(func() {
		if pid := readPid(t, pids); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a command killed at its timeout reports success")
		}
		if pid := readPid(t, pids); pid == 0 || alive(pid) {
			t.Fatalf("the command (pid %d) is still alive after its job returned", pid)
		}
	case <-time.After(timeout + ttl):
		t.Fatalf("a command ignoring SIGTERM still ran %v after its %v timeout: its kill grace outlasts the %v lease", time.Since(start)-timeout, timeout, ttl)
	}
}

// cutOff is a ledger the runner is cut off from once cut is set:
// heartbeats and finishes never get an answer, so the run's lease runs out
// and nothing the runner does can record its outcome.
func cutOff(b backend.Backend, cut *atomic.Bool) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnHeartbeat: func(ctx context.Context, next faultbackend.HeartbeatFunc, req backend.HeartbeatRequest) error {
			if !cut.Load() {
				return next(ctx, req)
			}
			<-ctx.Done()
			return ctx.Err()
		},
		OnFinish: func(ctx context.Context, next faultbackend.FinishFunc, req backend.FinishRequest) error {
			if !cut.Load() {
				return next(ctx, req)
			}
			<-ctx.Done()
			return ctx.Err()
		},
	}
}

// TestCommandGoneBeforeReclaim (issue 15 item 2): when a command job's
// lease runs out (its runner cut off from the backend), another instance reclaims the
// occurrence as soon as the backend expires it. A command that ignores
// SIGTERM was SIGKILLed only after the grace, and ran beside the retry; it
// must be killed at once, before the backend's expiry, so the retry never
// overlaps it.
func TestCommandGoneBeforeReclaim(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	pids := filepath.Join(t.TempDir(), "pid")
	const ttl = 1500 * time.Millisecond
	j := &JobConfig{Name: "stubborn", LeaseTTL: Duration(ttl), Command: &CommandJob{Argv: []string{"sh", "-c", stubborn}, Env: map[string]string{"PIDS": pids}}}
	t.Cleanup(func() {
		if pid := readPid(t, pids); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	var (
		mu          sync.Mutex
		cut         atomic.Bool
		first       time.Time // the occurrence a runs the command for
		firstErr    error
		firstDone   bool
		retried     bool
		overlapping bool
	)
	cmd := commandFunc(j, "a", nil, nil)
	// Instance a, cut off from the backend once it claimed, runs the command
	// for the first occurrence it claims (and nothing for later ones).
	aJob := schedule.Job{Name: "stubborn", Schedule: "* * * * * *", LeaseTTL: ttl, Func: func(ctx context.Context, r schedule.Run) error {
		mu.Lock()
		mine := r.Attempt == 1 && (first.IsZero() || first.Equal(r.ScheduledAt))
		if mine {
			first = r.ScheduledAt
		}
		mu.Unlock()
		if !mine {
			return nil
		}
		cut.Store(true)
		err := cmd(ctx, r)
		mu.Lock()
		firstErr, firstDone = err, true
		mu.Unlock()
		return err
	}}
	// a does not sweep: the retry is b's to run.
	startSched(t, cutOff(mem, &cut), "a", aJob, time.Hour)
	eventually.True(t, 20*time.Second, "instance a started the command", func() bool { return readPid(t, pids) > 0 })
	// Instance b reclaims the occurrence once the backend expired a's
	// lease, and looks whether a's command still runs.
	bJob := aJob
	bJob.Func = func(ctx context.Context, r schedule.Run) error {
		mu.Lock()
		defer mu.Unlock()
		if r.ScheduledAt.Equal(first) && r.Attempt > 1 {
			retried = true
			overlapping = alive(readPid(t, pids))
		}
		return nil
	}
	startSched(t, mem, "b", bJob, 20*time.Millisecond)
	eventually.True(t, 20*time.Second, "instance b ran the retry", func() bool { mu.Lock(); defer mu.Unlock(); return retried })
	mu.Lock()
	if overlapping {
		mu.Unlock()
		t.Fatalf("instance b's retry ran while a's command (pid %d) still ran: it outlived its lease", readPid(t, pids))
	}
	mu.Unlock()
	eventually.True(t, 20*time.Second, "a's command job returned", func() bool { mu.Lock(); defer mu.Unlock(); return firstDone })
	mu.Lock()
	defer mu.Unlock()
	if firstErr == nil || !strings.Contains(firstErr.Error(), "lease") {
		t.Fatalf("a's command job returned %v, want a failure that says its lease was lost", firstErr)
	}
}

func startSched(t *testing.T, b backend.Backend, instance string, job schedule.Job, sweep time.Duration) *schedule.Scheduler {
	t.Helper()
	s, err := schedule.New(b, schedule.WithInstance(instance), schedule.WithSweepEvery(sweep))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Register(job); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s
}
