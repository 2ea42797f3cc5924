package redis_test

import (
	"bufio"
	"context"
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
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testserver"
)

// Fault tests on real processes: the Redis server is a child process, and
// the holder is either this test binary re-executed (kill -9, SIGSTOP) or
// an in-process holder whose connection runs through a delaying proxy.

const faultTTL = 1500 * time.Millisecond

// The holder process: env LEASEHOLD_REDIS_HOLDER="addr prefix key". It
// acquires key, prints "acquired <token>", then every 20 ms prints
// "act <token> <unix ns>" when its deadline has not passed — the check a
// careful holder makes before acting — or "lost" and exits.
func TestHelperHolder(t *testing.T) {
	spec := os.Getenv("LEASEHOLD_REDIS_HOLDER")
	if spec == "" {
		t.Skip("helper process for the fault tests")
	}
	f := strings.Fields(spec)
	b := open(t, f[0], f[1])
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance("child"), leasehold.WithTTL(faultTTL))
	if err != nil {
		t.Fatal(err)
	}
	l, err := lk.Acquire(context.Background(), f[2])
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("acquired", l.Token())
	tick := time.NewTicker(20 * time.Millisecond)
	for {
		select {
		case <-l.Done():
		case <-tick.C:
		}
		if l.Context().Err() != nil || !time.Now().Before(l.Deadline()) {
			fmt.Println("lost")
			os.Exit(0)
		}
		fmt.Println("act", l.Token(), time.Now().UnixNano())
	}
}

type holder struct {
	cmd   *exec.Cmd
	lines chan string
	token leasehold.Token
}

// startHolder re-executes the test binary as a holder of key.
func startHolder(t *testing.T, addr, prefix, key string) *holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHolder$", "-test.v=false")
	cmd.Env = append(os.Environ(), "LEASEHOLD_REDIS_HOLDER="+addr+" "+prefix+" "+key)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, lines: make(chan string, 1024)}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	go func() {
		defer close(h.lines)
		r := bufio.NewReader(out)
		for {
			l, err := r.ReadString('\n')
			if l != "" {
				h.lines <- strings.TrimSpace(l)
			}
			if err != nil {
				return
			}
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
		t.Fatalf("holder said nothing within %v", within)
	}
	return ""
}

func locker(t *testing.T, b backend.Backend, name string) *leasehold.Locker {
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance(name), leasehold.WithTTL(faultTTL),
		leasehold.WithBackoff(5*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return lk
}

// TestKillHolder: kill -9 the process holding a lease; the next holder gets
// in within TTL + the retry period, with a greater token.
func TestKillHolder(t *testing.T) {
	srv := testserver.Redis(t)
	b := open(t, srv.Addr())
	h := startHolder(t, srv.Addr(), b.Prefix(), "job/kill")
	killed := time.Now()
	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := locker(t, b, "next").Acquire(ctx, "job/kill")
	if err != nil {
		t.Fatalf("Acquire after the holder was killed: %v", err)
	}
	defer l.Release(ctx)
	waited := time.Since(killed)
	if limit := faultTTL + 100*time.Millisecond + 400*time.Millisecond; waited > limit {
		t.Errorf("next holder waited %v after kill -9, want ≤ TTL %v + retry period 100ms (+400ms scheduling slack)", waited, faultTTL)
	}
	if l.Token() <= h.token {
		t.Errorf("next token %d not greater than the killed holder's %d", l.Token(), h.token)
	}
	t.Logf("kill -9 → next holder in %v, token %d → %d", waited, h.token, l.Token())
}

// TestPausedHolder: SIGSTOP the holder past its TTL; meanwhile another
// holder acquires with a greater token; after SIGCONT the woken holder sees
// its deadline passed and never acts again.
func TestPausedHolder(t *testing.T) {
	srv := testserver.Redis(t)
	b := open(t, srv.Addr())
	h := startHolder(t, srv.Addr(), b.Prefix(), "job/pause")
	if l := h.next(t, 10*time.Second); !strings.HasPrefix(l, "act ") {
		t.Fatalf("holder said %q, want act", l)
	}
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := locker(t, b, "next").Acquire(ctx, "job/pause")
	if err != nil {
		t.Fatalf("Acquire while the holder is stopped: %v", err)
	}
	defer l.Release(ctx)
	if l.Token() <= h.token {
		t.Fatalf("new token %d not greater than the stopped holder's %d", l.Token(), h.token)
	}
	resumed := time.Now()
	if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for {
		line := h.next(t, 10*time.Second)
		if line == "lost" {
			break
		}
		f := strings.Fields(line)
		ns, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
		if len(f) != 3 || f[0] != "act" || !time.Unix(0, ns).Before(resumed) {
			t.Fatalf("after SIGCONT the stale holder said %q (it must see its deadline passed before acting)", line)
		}
		// An "act" printed before the stop, still in the pipe.
	}
	t.Logf("stopped holder (token %d) woke and gave up; the new holder has token %d", h.token, l.Token())
}

// TestDelayedRenewReplies: the holder's connection runs through a proxy
// that delays every reply by 0.6×TTL, so renewals are applied at once but
// confirmed late. The holder's context must end at its send-time deadline,
// while the server still holds the lease (checked with PTTL on a direct
// connection); the next holder gets a greater token after server expiry.
func TestDelayedRenewReplies(t *testing.T) {
	srv := testserver.Redis(t)
	direct := open(t, srv.Addr())
	p, err := chaos.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	slow := open(t, p.Addr(), direct.Prefix())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := locker(t, slow, "slow").TryAcquire(ctx, "job/slow")
	if err != nil {
		t.Fatal(err)
	}
	// Watch the server's view on a direct connection: each sample (taken at
	// s, PTTL p) proves the server holds the lease until at least s+p.
	type sample struct {
		at   time.Time
		pttl time.Duration
	}
	samples := make(chan sample, 100000)
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	leaseKey := direct.Prefix() + "lease:{" + leasehold.LockKey("default", "job/slow") + "}"
	go func() {
		defer close(watched)
		for {
			select {
			case <-stopWatch:
				return
			default:
			}
			at := time.Now()
			if d, err := direct.Client().PTTL(ctx, leaseKey).Result(); err == nil {
				samples <- sample{at, d}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	p.SetDelay(faultTTL * 6 / 10)
	select {
	case <-l.Done():
	case <-time.After(20 * faultTTL):
		t.Fatalf("holder's context alive after %v of delayed renew replies", 20*faultTTL)
	}
	doneAt := time.Now()
	close(stopWatch)
	<-watched
	close(samples)
	var last sample
	for s := range samples {
		if s.at.After(doneAt) {
			break
		}
		if s.pttl <= 0 {
			t.Fatalf("server had no lease at %v, before the holder's context ended at %v", s.at, doneAt)
		}
		last = s
	}
	if last.at.IsZero() || !last.at.Add(last.pttl).After(doneAt) {
		t.Fatalf("no server sample proves the lease live when the holder gave up (last %+v)", last)
	}
	t.Logf("holder gave up ≥ %v before the server's expiry (cause: %v)", last.at.Add(last.pttl).Sub(doneAt), context.Cause(l.Context()))
	p.SetDelay(0)
	next, err := locker(t, direct, "next").Acquire(ctx, "job/slow")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Token() <= l.Token() {
		t.Fatalf("next token %d not greater than %d", next.Token(), l.Token())
	}
}
