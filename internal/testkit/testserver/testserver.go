// Package testserver starts real coordination servers (today redis-server;
// etcd, ZooKeeper, PostgreSQL and MariaDB follow the same shape) as child
// processes for tests: each on a free loopback port, its data in
// t.TempDir(), stopped by t.Cleanup. A Server can be stopped, killed with
// SIGKILL, paused with SIGSTOP, resumed and restarted on the same port and
// data directory, which is what fault tests need.
//
// A missing server binary skips the test locally and fails it when the
// environment variable CI is "true": in CI every backend must be tested.
//
// Adding a server means writing a Spec: how to build its command line for a
// port and a data directory, and how to tell that it is ready (see Redis).
package testserver

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/internal/childproc"
)

// TB is what this package needs of a test: *testing.T and *testing.B are
// one, and so is the chaos harness's stand-in when it starts servers
// outside tests. The package does not import testing, so a program that
// uses it (leasehold-lab chaos) does not link the test framework.
type TB interface {
	Helper()
	Cleanup(func())
	TempDir() string
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Skipf(format string, args ...any)
}

// Spec describes one kind of server.
type Spec struct {
	// Name is used in messages and log file names ("redis").
	Name string
	// Binary is the executable, an absolute path or a name looked up in PATH.
	Binary string
	// Args returns the command line (without the binary) for a server
	// listening on 127.0.0.1:port with its data in dir.
	Args func(port int, dir string) []string
	// Ready reports whether the server at addr answers; Start polls it until
	// it does or StartTimeout passes.
	Ready func(ctx context.Context, addr string) error
	// StartTimeout bounds the wait for Ready (default 20 s).
	StartTimeout time.Duration
}

// Server is one running (or stopped) server process.
type Server struct {
	t    TB
	spec Spec
	port int
	dir  string
	log  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start starts a server described by spec on a free loopback port, with its
// data in a fresh t.TempDir(), and stops it in t.Cleanup. It skips the test
// (fails it when CI=true) if the binary cannot be found.
func Start(t TB, spec Spec) *Server {
	t.Helper()
	bin, err := exec.LookPath(spec.Binary)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("testserver: %s binary %q not found (CI=true: a missing server fails the run): %v", spec.Name, spec.Binary, err)
		}
		t.Skipf("testserver: %s binary %q not found: %v", spec.Name, spec.Binary, err)
	}
	spec.Binary = bin
	if spec.StartTimeout <= 0 {
		spec.StartTimeout = 20 * time.Second
	}
	dir := t.TempDir()
	s := &Server{t: t, spec: spec, dir: dir, log: filepath.Join(dir, spec.Name+".log")}
	// A port picked free can be taken before the server binds it; retry a
	// few times with another port.
	for attempt := 0; ; attempt++ {
		s.port = FreePort(t)
		err := s.start()
		if err == nil {
			break
		}
		if attempt == 4 {
			t.Fatalf("testserver: %s: %v", spec.Name, err)
		}
	}
	t.Cleanup(s.Stop)
	return s
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t TB) int {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testserver: find a free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if handedOut.add(port) {
			return port
		}
		// The kernel gave back a port this process handed out before and
		// whose server may not listen yet (a 3-member etcd cluster once got
		// one port for two members): ask again.
	}
}

// handedOut is the set of ports FreePort returned in this process. Ports
// are a process-wide resource, so this is the one piece of package state.
var handedOut = &portSet{m: map[int]bool{}}

type portSet struct {
	mu sync.Mutex
	m  map[int]bool
}

// add records port and reports whether it was new.
func (s *portSet) add(port int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[port] {
		return false
	}
	s.m[port] = true
	return true
}

// Addr is the server's "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port is the server's port.
func (s *Server) Port() int { return s.port }

// Dir is the server's data directory.
func (s *Server) Dir() string { return s.dir }

// PID is the process id of the running server (0 when stopped).
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *Server) start() error {
	f, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.spec.Binary, s.spec.Args(s.port, s.dir)...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so a SIGINT to the test run does not race
	// with Cleanup, and SIGSTOP stops only the server.
	childproc.Prepare(cmd, childproc.Options{Group: true})
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", s.spec.Binary, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), s.spec.StartTimeout)
	defer cancel()
	var last error
	for {
		select {
		case <-done:
			return fmt.Errorf("%s exited during start-up; log:\n%s", s.spec.Name, s.tail())
		default:
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		last = s.spec.Ready(pctx, s.Addr())
		pcancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			s.signal(os.Kill)
			<-done
			return fmt.Errorf("%s at %s not ready within %v: %v; log:\n%s", s.spec.Name, s.Addr(), s.spec.StartTimeout, last, s.tail())
		case <-done:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// tail returns the end of the server's log.
func (s *Server) tail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(bytes.TrimSpace(b))
}

func (s *Server) signal(sig os.Signal) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
	}
	return childproc.Signal(s.cmd.Process, sig) == nil
}

// wait waits for the process to exit, killing it after grace.
func (s *Server) wait(grace time.Duration) {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-time.After(grace):
		s.signal(childproc.SigCont)
		s.signal(os.Kill)
		<-done
	}
	s.mu.Lock()
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
}

// Stop stops the server gracefully (SIGTERM, then SIGKILL after 10 s). A
// paused server is resumed first. Stop is idempotent.
func (s *Server) Stop() {
	s.signal(childproc.SigCont)
	s.signal(syscall.SIGTERM)
	s.wait(10 * time.Second)
}

// Kill kills the server with SIGKILL (a crash: nothing is flushed) and
// waits for it to exit.
func (s *Server) Kill() {
	s.signal(os.Kill)
	s.wait(10 * time.Second)
}

// Pause stops the server with SIGSTOP; connections stay open and requests
// hang until Resume.
func (s *Server) Pause() {
	if !s.signal(childproc.SigStop) {
		s.t.Fatalf("testserver: pause %s: not running", s.spec.Name)
	}
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() {
	if !s.signal(childproc.SigCont) {
		s.t.Fatalf("testserver: resume %s: not running", s.spec.Name)
	}
}

// Restart stops the server (if running) and starts it again on the same
// port with the same data directory.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.startAgain()
}

// Start starts a stopped or killed server again on the same port and data
// directory.
func (s *Server) Start() {
	s.t.Helper()
	if s.PID() != 0 {
		s.t.Fatalf("testserver: start %s: already running", s.spec.Name)
	}
	s.startAgain()
}

func (s *Server) startAgain() {
	s.t.Helper()
	// The old process's port may linger briefly; retry until the deadline.
	deadline := time.Now().Add(s.spec.StartTimeout)
	for {
		err := s.start()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("testserver: restart %s on port %d: %v", s.spec.Name, s.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
