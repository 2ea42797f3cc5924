package etcd_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/testserver"
)

// Fault tests on real processes: etcd runs as child processes, and the
// holder is either this test binary re-executed (kill -9, SIGSTOP) or a set
// of in-process workers on a 3-member cluster whose leader is killed.

const faultTTL = 2 * time.Second

func locker(t testing.TB, b backend.Leases, name string) *leasehold.Locker {
	t.Helper()
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance(name), leasehold.WithTTL(faultTTL),
		leasehold.WithBackoff(5*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return lk
}

// TestHelperHolder is the holder process: env LEASEHOLD_ETCD_HOLDER="addr
// prefix key". It acquires key and prints "acquired <token>"; then every
// 20 ms, if its deadline has not passed, it writes through the fenced
// helper and prints "act <token>"; once the deadline has passed it tries
// one more fenced write (which must be rejected), prints "lost <result>"
// and exits.
func TestHelperHolder(t *testing.T) {
	spec := os.Getenv("LEASEHOLD_ETCD_HOLDER")
	if spec == "" {
		t.Skip("helper process for the fault tests")
	}
	f := strings.Fields(spec)
	b := open(t, []string{f[0]}, f[1])
	ctx := context.Background()
	l, err := locker(t, b, "child").Acquire(ctx, f[2])
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("acquired", l.Token())
	bkey := "default:lock:" + f[2]
	tick := time.NewTicker(20 * time.Millisecond)
	for {
		select {
		case <-l.Done():
		case <-tick.C:
		}
		if l.Context().Err() != nil || !time.Now().Before(l.Deadline()) {
			err := b.FencedPut(ctx, bkey, uint64(l.Token()), f[1]+"sink", "child-late")
			switch {
			case errors.Is(err, backend.ErrLeaseLost):
				fmt.Println("lost rejected")
			default:
				fmt.Println("lost accepted", err)
			}
			os.Exit(0)
		}
		if err := b.FencedPut(ctx, bkey, uint64(l.Token()), f[1]+"sink", "child"); err != nil {
			fmt.Println("lost fenced", err)
			os.Exit(0)
		}
		fmt.Println("act", l.Token())
	}
}

type holder struct {
	cmd   *exec.Cmd
	lines chan string
	token leasehold.Token
}

func startHolder(t *testing.T, addr, prefix, key string) *holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHolder$", "-test.v=false")
	cmd.Env = append(os.Environ(), "LEASEHOLD_ETCD_HOLDER="+addr+" "+prefix+" "+key)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, lines: make(chan string, 4096)}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	l := h.next(t, 30*time.Second)
	tok, ok := strings.CutPrefix(l, "acquired ")
	n, err := strconv.ParseUint(tok, 10, 64)
	if !ok || err != nil {
		t.Fatalf("holder said %q, want acquired <token>", l)
	}
	h.token = leasehold.Token(n)
	return h
}

func (h *holder) next(t *testing.T, within time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-h.lines:
		if !ok {
			t.Fatalf("holder exited")
		}
		return l
	case <-time.After(within):
		t.Fatalf("holder silent for %v", within)
	}
	return ""
}

// TestKill9Holder: the holder process is killed with SIGKILL while it holds
// the lock; a waiter gets the lock once etcd expires the holder's lease,
// with a greater token.
func TestKill9Holder(t *testing.T) {
	srv := testserver.Etcd(t)
	b := open(t, []string{srv.Addr()})
	h := startHolder(t, srv.Addr(), b.Prefix(), "job/k9")
	h.next(t, 10*time.Second) // it acts
	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := locker(t, b, "next").Acquire(ctx, "job/k9")
	if err != nil {
		t.Fatalf("Acquire after the holder was killed: %v", err)
	}
	defer l.Release(ctx)
	if l.Token() <= h.token {
		t.Fatalf("token %d after the kill not greater than the dead holder's %d", l.Token(), h.token)
	}
	t.Logf("acquired %v after kill -9 (TTL %v), token %d > %d", time.Since(killed), faultTTL, l.Token(), h.token)
}

// TestSIGSTOPHolder: the holder is paused past its TTL; meanwhile the next
// holder gets a greater token. Resumed, the old holder finds its deadline
// passed before it acts, and its fenced write is rejected.
func TestSIGSTOPHolder(t *testing.T) {
	srv := testserver.Etcd(t)
	b := open(t, []string{srv.Addr()})
	h := startHolder(t, srv.Addr(), b.Prefix(), "job/stop")
	h.next(t, 10*time.Second)
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := locker(t, b, "next").Acquire(ctx, "job/stop")
	if err != nil {
		t.Fatalf("Acquire while the holder is stopped: %v", err)
	}
	defer l.Release(ctx)
	if l.Token() <= h.token {
		t.Fatalf("token %d not greater than the stopped holder's %d", l.Token(), h.token)
	}
	// Drain what the holder printed before it was stopped.
	for len(h.lines) > 0 {
		<-h.lines
	}
	if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for {
		line := h.next(t, 20*time.Second)
		if strings.HasPrefix(line, "act") {
			// A line buffered in the pipe before SIGSTOP is fine; a new
			// act would have to pass the fenced write, which the next
			// holder's grant makes impossible.
			continue
		}
		if line != "lost rejected" {
			t.Fatalf("resumed holder said %q, want \"lost rejected\"", line)
		}
		break
	}
}
