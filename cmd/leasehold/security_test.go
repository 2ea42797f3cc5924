package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/daemon"
)

// rawHTTPServer answers every request on a loopback port with the raw
// status line given (which net/http's server would not write), no body,
// and closes the connection. It returns the base URL.
func rawHTTPServer(t *testing.T, statusLine string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", statusLine)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// startDaemonWithJobs writes a config with the jobs text given, starts
// "leasehold run" on it with a read token from the environment, and
// returns the process, the API's URL and the read token.
func startDaemonWithJobs(t *testing.T, e *env, backendURL, jobs string) (*proc, string, string) {
	t.Helper()
	const secret = "read-token-for-security-0123456789"
	t.Setenv(daemon.EnvReadToken, secret) // inherited by the daemon
	conf := e.path("leasehold.yaml")
	if err := os.WriteFile(conf, []byte("backend: "+backendURL+"\ngrace: 2s\njobs:\n"+jobs), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	p := e.start("run", "--config", conf, "--instance", "sec1", "--http", addr)
	return p, "http://" + addr, secret
}

// TestCLITablesEscapeControlCharacters (issue 18 item 6): a job result with
// terminal escapes (an HTTP status line carrying ESC ] 0 ; … BEL, which
// would set the terminal's title) is printed escaped by "leasehold runs"
// and "leasehold status", never raw.
func TestCLITablesEscapeControlCharacters(t *testing.T) {
	e := newEnv(t)
	evil := rawHTTPServer(t, "500 \x1b]0;pwned\x07\x1b[2J\x9b31m")
	p, api, token := startDaemonWithJobs(t, e, e.url, `  - name: evil
    schedule: "@every 300ms"
    lease_ttl: 2s
    http: {url: "`+evil+`/x"}
`)
	waitFor(t, 30*time.Second, "a failed run of the evil job", func() bool {
		r := e.run("runs", "--job", "evil", "--state", "failed", "--json")
		var rows []runInfo
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &rows) == nil && len(rows) > 0
	})
	for _, args := range [][]string{
		{"runs"},
		{"runs", "--job", "evil"},
		{"status", "--api", api, "--token", token},
	} {
		var r result
		waitFor(t, 30*time.Second, fmt.Sprintf("leasehold %q succeeds", args), func() bool { r = e.run(args...); return r.code == 0 })
		if strings.ContainsAny(r.stdout, "\x1b\x07\u009b") || strings.Contains(r.stdout, "\x9b") {
			t.Errorf("leasehold %q printed raw control characters: %q", args, r.stdout)
		}
		if !strings.Contains(r.stdout, `answered 500 \x1b`) {
			t.Errorf("leasehold %q does not show the escaped status line:\n%s", args, r.stdout)
		}
	}
	_ = p
}

// TestCellEscapes: what cell writes for each kind of unsafe character.
func TestCellEscapes(t *testing.T) {
	for in, want := range map[string]string{
		"plain ✓": "plain ✓", "a\x1b]0;t\x07": `a\x1b]0;t\x07`, "\x9b": `\x9b`, "\u009b": `\x9b`,
		"x\ty\nz": `x\ty\nz`, "\u202eevil": `\u202eevil`, "\x7f": `\x7f`,
	} {
		if got := cell(in); got != want {
			t.Errorf("cell(%q) = %q, want %q", in, got, want)
		}
	}
}
