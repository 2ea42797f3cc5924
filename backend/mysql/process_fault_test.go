package mysql

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// Helper processes: the test binary re-executed with LEASEHOLD_MYSQL_HELPER
// set runs TestHelperProcess only, in one of these modes:
//
//	hold:  acquire LEASEHOLD_MYSQL_KEY for 2s, print "token N", renew every
//	       500ms until killed.
//	claim: print "ready", wait for a line on stdin, then claim one
//	       occurrence from 8 goroutines and print "win" or "lost" per claim.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv("LEASEHOLD_MYSQL_HELPER")
	if mode == "" {
		t.Skip("helper process for the multi-process tests")
	}
	ctx := context.Background()
	b, err := Open(ctx, os.Getenv("LEASEHOLD_MYSQL_URL"))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	defer b.Close()
	switch mode {
	case "hold":
		o := backend.Owner{Instance: "child", Nonce: backend.NewNonce()}
		key := os.Getenv("LEASEHOLD_MYSQL_KEY")
		g, err := b.Acquire(ctx, key, o, 2*time.Second)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		fmt.Println("token", g.Token)
		for {
			time.Sleep(500 * time.Millisecond)
			if _, err := b.Renew(ctx, key, o, g.Token, 2*time.Second); err != nil {
				fmt.Println("error", err)
				os.Exit(2)
			}
		}
	case "claim":
		at, _ := strconv.ParseInt(os.Getenv("LEASEHOLD_MYSQL_AT"), 10, 64)
		fmt.Println("ready")
		bufio.NewReader(os.Stdin).ReadString('\n')
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o := backend.Owner{Instance: fmt.Sprintf("p%d-g%d", os.Getpid(), i), Nonce: backend.NewNonce()}
				_, err := b.Claim(ctx, backend.ClaimRequest{Job: "job", ScheduledAt: time.UnixMilli(at), SpecVersion: "v1", Owner: o, TTL: time.Minute})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					fmt.Println("win", o.Instance)
				case errors.Is(err, backend.ErrClaimed):
					fmt.Println("lost")
				default:
					fmt.Println("error", strings.ReplaceAll(err.Error(), "\n", " "))
				}
			}()
		}
		wg.Wait()
	}
	os.Exit(0)
}

// helper starts a helper process; lines is fed with its stdout lines.
func helper(t *testing.T, mode, u string, env ...string) (*exec.Cmd, io.WriteCloser, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), append([]string{"LEASEHOLD_MYSQL_HELPER=" + mode, "LEASEHOLD_MYSQL_URL=" + u}, env...)...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		s := bufio.NewScanner(out)
		for s.Scan() {
			lines <- s.Text()
		}
	}()
	return cmd, stdin, lines
}

func nextLine(t *testing.T, lines <-chan string, within time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("helper process exited early")
		}
		if strings.HasPrefix(l, "error") {
			t.Fatalf("helper: %s", l)
		}
		return l
	case <-time.After(within):
		t.Fatalf("no line from the helper within %v", within)
	}
	return ""
}

// TestKill9Holder kills a holder process with SIGKILL: its lease expires by
// the server's clock within its TTL, and the next holder's token is greater.
func TestKill9Holder(t *testing.T) {
	b, u := openTest(t)
	defer b.Close()
	ctx := context.Background()
	cmd, _, lines := helper(t, "hold", u, "LEASEHOLD_MYSQL_KEY=kill/k")
	var token uint64
	if _, err := fmt.Sscanf(nextLine(t, lines, 60*time.Second), "token %d", &token); err != nil {
		t.Fatal(err)
	}
	l, err := b.Get(ctx, "kill/k")
	if err != nil || l.Token != token || l.Owner.Instance != "child" {
		t.Fatalf("Get = %+v, %v; want the child with token %d", l, err, token)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed := time.Now()
	o := backend.Owner{Instance: "parent", Nonce: backend.NewNonce()}
	deadline := time.Now().Add(30 * time.Second)
	for {
		g, err := b.Acquire(ctx, "kill/k", o, 10*time.Second)
		if err == nil {
			waited := time.Since(killed)
			if g.Token <= token {
				t.Fatalf("token after the holder's death %d, want > %d", g.Token, token)
			}
			// The child's last renewal (≤ 500ms before the kill) granted 2s.
			if waited > 2*time.Second+500*time.Millisecond {
				t.Errorf("acquired %v after the kill, want within the 2s TTL (+ polling slack)", waited)
			}
			t.Logf("acquired %v after the kill, token %d > %d", waited.Round(time.Millisecond), g.Token, token)
			return
		}
		if !errors.Is(err, backend.ErrHeld) || time.Now().After(deadline) {
			t.Fatalf("Acquire after kill: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // no push events on MySQL: poll
	}
}

// TestClaimAcrossProcesses: 32 claimers (4 processes × 8 goroutines) of one
// occurrence; exactly one wins, the others are told it is claimed.
func TestClaimAcrossProcesses(t *testing.T) {
	b, u := openTest(t)
	defer b.Close()
	at := backend.Instant(time.Now().Add(-time.Second))
	var ins []io.WriteCloser
	var outs []<-chan string
	for range 4 {
		_, in, lines := helper(t, "claim", u, "LEASEHOLD_MYSQL_AT="+strconv.FormatInt(at.UnixMilli(), 10))
		if l := nextLine(t, lines, 60*time.Second); l != "ready" {
			t.Fatalf("helper said %q", l)
		}
		ins, outs = append(ins, in), append(outs, lines)
	}
	for _, in := range ins {
		io.WriteString(in, "go\n")
	}
	var winners []string
	lost := 0
	for _, lines := range outs {
		for range 8 {
			l := nextLine(t, lines, 60*time.Second)
			switch {
			case strings.HasPrefix(l, "win "):
				winners = append(winners, strings.TrimPrefix(l, "win "))
			case l == "lost":
				lost++
			default:
				t.Fatalf("helper said %q", l)
			}
		}
	}
	if len(winners) != 1 || lost != 31 {
		t.Fatalf("%d winners %v and %d losers among 32 claims, want 1 and 31", len(winners), winners, lost)
	}
	r, err := b.GetRun(context.Background(), "job", at)
	if err != nil || r.Owner.Instance != winners[0] {
		t.Fatalf("GetRun = %+v, %v; want the winner %s", r, err, winners[0])
	}
}
