// Package sdnotify speaks systemd's service notification protocol
// (sd_notify(3)) by hand, without a dependency: one datagram per message to
// the unix socket named by $NOTIFY_SOCKET ("@name" is Linux's abstract
// namespace). A unit with Type=notify waits for READY=1 before it counts
// the service started; STOPPING=1 says shutdown has begun; with WatchdogSec
// set, systemd passes $WATCHDOG_USEC and restarts the service if WATCHDOG=1
// does not come within it.
//
// Outside systemd $NOTIFY_SOCKET is unset and every call does nothing.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// Notifier sends notifications to the service manager. The zero value and
// a nil *Notifier send nothing.
type Notifier struct {
	socket   string
	watchdog time.Duration // 0: no watchdog requested
}

// FromEnv returns the notifier the service manager asked for through
// $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID (a watchdog meant for
// another pid is not ours). It returns an error for a malformed
// $WATCHDOG_USEC.
func FromEnv() (*Notifier, error) {
	n := &Notifier{socket: os.Getenv("NOTIFY_SOCKET")}
	if n.socket == "" {
		return n, nil
	}
	usec := os.Getenv("WATCHDOG_USEC")
	if usec == "" {
		return n, nil
	}
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return n, nil
	}
	u, err := strconv.ParseUint(usec, 10, 63)
	if err != nil || u == 0 {
		return n, fmt.Errorf("sdnotify: WATCHDOG_USEC %q: not a positive number of microseconds", usec)
	}
	n.watchdog = time.Duration(u) * time.Microsecond
	return n, nil
}

// Enabled reports whether a service manager listens.
func (n *Notifier) Enabled() bool { return n != nil && n.socket != "" }

// WatchdogInterval is how often WATCHDOG=1 is due: half the manager's
// timeout, as sd_watchdog_enabled(3) advises; 0 when no watchdog is set.
func (n *Notifier) WatchdogInterval() time.Duration {
	if n == nil {
		return 0
	}
	return n.watchdog / 2
}

// Send sends state ("READY=1", "STOPPING=1", "STATUS=…", lines joined by
// "\n") in one datagram.
func (n *Notifier) Send(state string) error {
	if !n.Enabled() {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.socket, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	return nil
}

// Watchdog sends WATCHDOG=1 every WatchdogInterval while alive returns
// true, until stop is called. It does nothing without a watchdog.
func (n *Notifier) Watchdog(alive func() bool) (stop func()) {
	every := n.WatchdogInterval()
	if !n.Enabled() || every <= 0 {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if alive() {
				_ = n.Send("WATCHDOG=1")
			}
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(quit); <-done }
}
