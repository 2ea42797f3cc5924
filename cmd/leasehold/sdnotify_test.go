//go:build unix

package main

import (
	"github.com/leasehold/leasehold/internal/testkit"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunNotifiesSystemd: "leasehold run" under a Type=notify unit with
// WatchdogSec: a real daemon, with $NOTIFY_SOCKET on a unixgram socket the
// test listens on, sends READY=1 once it runs, WATCHDOG=1 at half of
// $WATCHDOG_USEC, and STOPPING=1 when SIGTERM starts its shutdown.
func TestRunNotifiesSystemd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sock := e.path("notify")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	conf := e.path("leasehold.yaml")
	if err := os.WriteFile(conf, []byte("backend: "+e.url+"\njobs:\n  - name: idle\n    schedule: \"@every 1h\"\n    command: {argv: [/bin/true]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := e.command("run", "--config", conf, "--http", "off")
	cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=200000", "WATCHDOG_PID=")
	var stderr testkit.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("leasehold run's stderr:\n%s", stderr.String())
		}
	}()

	// next returns the next notification, within the deadline.
	deadline := time.Now().Add(60 * time.Second)
	next := func() string {
		t.Helper()
		_ = l.SetReadDeadline(deadline)
		buf := make([]byte, 4096)
		n, err := l.Read(buf)
		if err != nil {
			t.Fatalf("no notification from leasehold run: %v", err)
		}
		return string(buf[:n])
	}
	until := func(want string) {
		t.Helper()
		for {
			msg := next()
			if strings.Contains("\n"+msg+"\n", "\n"+want+"\n") {
				return
			}
		}
	}
	until("READY=1")
	until("WATCHDOG=1")
	until("WATCHDOG=1")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	until("STOPPING=1")
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatalf("leasehold run after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("leasehold run did not exit within 30s of SIGTERM")
	}
}
