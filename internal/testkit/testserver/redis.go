package testserver

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
)

// RedisBinary is where Debian's redis-server package installs the server.
const RedisBinary = "/usr/bin/redis-server"

// Redis starts a redis-server with no persistence (--save "" --appendonly
// no) unless extra arguments say otherwise, e.g.
//
//	testserver.Redis(t, "--appendonly", "yes", "--appendfsync", "always")
//
// Later arguments override earlier ones, as on redis-server's command line.
func Redis(t TB, extra ...string) *Server {
	t.Helper()
	bin := RedisBinary
	if _, err := exec.LookPath(bin); err != nil {
		bin = "redis-server" // elsewhere in PATH
	}
	return Start(t, Spec{
		Name:   "redis",
		Binary: bin,
		Args: func(port int, dir string) []string {
			args := []string{
				"--port", fmt.Sprint(port), "--bind", "127.0.0.1",
				"--save", "", "--appendonly", "no", "--dir", dir,
				"--daemonize", "no", "--protected-mode", "no",
			}
			return append(args, extra...)
		},
		Ready: redisPing,
	})
}

// redisPing sends PING in the inline protocol and expects +PONG.
func redisPing(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}
