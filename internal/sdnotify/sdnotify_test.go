//go:build unix

package sdnotify

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func listen(t *testing.T) (string, *net.UnixConn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return path, c
}

func recv(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

func TestFromEnv(t *testing.T) {
	path, c := listen(t)
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "3000000")
	t.Setenv("WATCHDOG_PID", "")
	n, err := FromEnv()
	if err != nil || !n.Enabled() || n.WatchdogInterval() != 1500*time.Millisecond {
		t.Fatalf("FromEnv = %+v, %v; want enabled with a 1.5s watchdog interval", n, err)
	}
	if err := n.Send("READY=1\nSTATUS=up"); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, c); got != "READY=1\nSTATUS=up" {
		t.Fatalf("received %q", got)
	}

	t.Setenv("WATCHDOG_PID", "1") // another process's watchdog
	if n, err := FromEnv(); err != nil || n.WatchdogInterval() != 0 {
		t.Fatalf("FromEnv with another WATCHDOG_PID = %+v, %v; want no watchdog", n, err)
	}
	t.Setenv("WATCHDOG_PID", "")
	t.Setenv("WATCHDOG_USEC", "soon")
	if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), `"soon"`) {
		t.Fatalf("FromEnv with WATCHDOG_USEC=soon: %v; want an error naming the value", err)
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if n, err := FromEnv(); err != nil || n.Enabled() || n.Send("READY=1") != nil {
		t.Fatalf("without NOTIFY_SOCKET: %+v, %v; want a notifier that sends nothing", n, err)
	}
}

func TestWatchdogPingsWhileAlive(t *testing.T) {
	path, c := listen(t)
	n := &Notifier{socket: path, watchdog: 40 * time.Millisecond}
	stop := n.Watchdog(func() bool { return true })
	for range 3 {
		if got := recv(t, c); got != "WATCHDOG=1" {
			t.Fatalf("received %q; want WATCHDOG=1", got)
		}
	}
	stop()
}
