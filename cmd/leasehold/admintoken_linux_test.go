package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasehold/leasehold/daemon"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// openPTY opens a pseudo-terminal pair; the master's output is collected
// into the returned buffer until the slave side is closed everywhere.
func openPTY(t *testing.T) (slave *os.File, out *testkit.Buffer, eof <-chan struct{}) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	out = &testkit.Buffer{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(out, m) // ends with EIO once no process holds the slave
	}()
	t.Cleanup(func() { m.Close(); slave.Close() })
	return slave, out, done
}

// startOnPTY starts leasehold with its standard output on a fresh
// pseudo-terminal.
func (e *env) startOnPTY(t *testing.T, args ...string) (*proc, *testkit.Buffer, <-chan struct{}) {
	t.Helper()
	slave, out, eof := openPTY(t)
	p := &proc{cmd: e.command(args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = slave, &p.stderr
	p.cmd.WaitDelay = time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close() // the child holds it now
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.done })
	return p, out, eof
}

var tokenLine = regexp.MustCompile(`(?m)^\s+([A-Za-z0-9_-]{43})\s*$`)

// TestGeneratedAdminTokenEndToEnd (issue 18 item 4): "leasehold run" with
// no token configured generates an admin token into a 0600 file next to
// the database, prints it once to its terminal (never to the log), and
// needs it for actions; "leasehold status" reads it from the file; a
// second start reads the file and prints nothing.
func TestGeneratedAdminTokenEndToEnd(t *testing.T) {
	t.Setenv(daemon.EnvAdminToken, "")
	t.Setenv(daemon.EnvReadToken, "")
	t.Setenv(EnvAPIToken, "")
	e := newEnv(t)
	conf := e.path("leasehold.yaml")
	if err := os.WriteFile(conf, []byte("grace: 1s\njobs:\n  - {name: tick, schedule: \"@every 1h\", command: {argv: [/bin/true]}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	api := "http://" + addr
	p, out, _ := e.startOnPTY(t, "run", "--config", conf, "--instance", "tok1", "--http", addr)
	var secret string
	eventually.True(t, 30*time.Second, "the token printed on the terminal", func() bool {
		if m := tokenLine.FindStringSubmatch(out.String()); m != nil {
			secret = m[1]
		}
		return secret != ""
	})
	file := e.path("leasehold.db") + daemon.AdminTokenSuffix
	data, err := os.ReadFile(file)
	if err != nil || strings.TrimSpace(string(data)) != secret {
		t.Fatalf("token file %s: %v; holds the printed token: %v", file, err, strings.TrimSpace(string(data)) == secret)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	eventually.True(t, 30*time.Second, "the daemon running", func() bool { return strings.Contains(p.stderr.String(), "daemon running") })
	post := func(token string) int {
		req, _ := http.NewRequest("POST", api+"/api/v1/jobs/tick/trigger", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(""); code != http.StatusUnauthorized {
		t.Errorf("trigger without a token = %d, want 401", code)
	}
	if code := post(secret); code != http.StatusOK && code != http.StatusAccepted {
		t.Errorf("trigger with the generated token = %d", code)
	}
	// status: the token from the file, found through --backend or --config.
	r := e.expect(0, "status", "--api", api)
	if !strings.Contains(r.stdout, "tok1 (this)") {
		t.Errorf("status: %s", r.stdout)
	}
	e.expect(0, "status", "--api", api, "--config", conf)
	// The token is in no log line.
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("daemon exit %d: %s", code, p.stderr.String())
	}
	if strings.Contains(p.stderr.String(), secret) || !strings.Contains(p.stderr.String(), file) {
		t.Fatalf("the log shows the token, or does not name its file:\n%s", p.stderr.String())
	}

	// A second start reads the file and prints no token.
	p2, out2, eof2 := e.startOnPTY(t, "run", "--config", conf, "--instance", "tok1", "--http", addr)
	eventually.True(t, 30*time.Second, "the second daemon running", func() bool { return strings.Contains(p2.stderr.String(), "daemon running") })
	_ = p2.cmd.Process.Signal(syscall.SIGTERM)
	p2.wait(t, 30*time.Second)
	<-eof2
	if strings.Contains(out2.String(), secret) || strings.Contains(out2.String(), "generated") {
		t.Fatalf("the second start printed the token again: %q", out2.String())
	}
}
