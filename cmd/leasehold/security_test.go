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
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
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
	p := e.start("--backend", backendURL, "run", "--config", conf, "--instance", "sec1", "--http", addr)
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
	eventually.True(t, 30*time.Second, "a failed run of the evil job", func() bool {
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
		eventually.True(t, 30*time.Second, fmt.Sprintf("leasehold %q succeeds", args), func() bool { r = e.run(args...); return r.code == 0 })
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

// postgresURL is the shared test PostgreSQL server (testserver.PostgresURL:
// skipped without it, failed in CI), with a table prefix of this test's own
// and the extra query params.
func postgresURL(t *testing.T, params string) string {
	t.Helper()
	return fmt.Sprintf("%s&table_prefix=lh18s%d_&%s", testserver.PostgresURL(t), time.Now().UnixNano()%1e9, params)
}

// TestSecretsRedactedEverywhere (issue 18 item 2): secrets planted in the
// backend URL (a ?password= parameter), in HTTP job URLs (userinfo and
// ?api_key= / ?token= parameters) appear in none of the outputs: the
// daemon's log, run history through the CLI (table and JSON), the admin
// API, "leasehold status" and the CLI's errors.
func TestSecretsRedactedEverywhere(t *testing.T) {
	const pgSecret, apiKey, userPW, tokSecret = "PGSECRETpw1", "APIKEYsecret2", "USERPWsecret3", "TOKsecret4"
	secrets := []string{pgSecret, apiKey, userPW, tokSecret}
	e := newEnv(t)
	pg := postgresURL(t, "password="+pgSecret)
	hook := rawHTTPServer(t, "500 Internal Server Error")
	closed := "http://user:" + userPW + "@" + freeAddr(t) + "/x?token=" + tokSecret
	p, api, token := startDaemonWithJobs(t, e, pg, `  - name: hook
    schedule: "@every 300ms"
    lease_ttl: 2s
    http: {url: "`+hook+`/hook?api_key=`+apiKey+`&x=1"}
  - name: refused
    schedule: "@every 300ms"
    lease_ttl: 2s
    http: {url: "`+closed+`"}
`)
	var outputs []string
	for _, job := range []string{"hook", "refused"} {
		eventually.True(t, 30*time.Second, "a failed run of "+job, func() bool {
			r := e.run("--backend", pg, "runs", "--job", job, "--state", "failed", "--json")
			var rows []runInfo
			ok := r.code == 0 && json.Unmarshal([]byte(r.stdout), &rows) == nil && len(rows) > 0 && rows[0].Error != ""
			if ok {
				outputs = append(outputs, r.stdout)
			}
			return ok
		})
	}
	for _, args := range [][]string{
		{"--backend", pg, "runs"},
		{"--backend", pg, "locks"},
		{"--backend", pg, "jobs", "--config", e.path("leasehold.yaml")},
		{"status", "--api", api, "--token", token},
		{"status", "--api", api, "--token", token, "--json"},
	} {
		var r result
		eventually.True(t, 30*time.Second, fmt.Sprintf("leasehold %q succeeds", args), func() bool { r = e.run(args...); return r.code == 0 })
		outputs = append(outputs, r.stdout, r.stderr)
	}
	// Errors that repeat the backend URL.
	for _, bad := range []string{pg + "&sslmode=bogus", "redis://127.0.0.1:6379/0?password=" + pgSecret + "&bogus=1"} {
		r := e.run("--backend", bad, "locks")
		if r.code == 0 {
			t.Errorf("locks with a bad backend URL succeeded")
		}
		outputs = append(outputs, r.stdout, r.stderr)
	}
	req, _ := http.NewRequest("GET", api+"/api/v1/runs?limit=100", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "hook") {
		t.Fatalf("GET /api/v1/runs: %s", body)
	}
	outputs = append(outputs, string(body), p.stderr.String())
	all := strings.Join(outputs, "\n")
	if !strings.Contains(all, "api_key=xxxxx") || !strings.Contains(all, "password=xxxxx") {
		t.Errorf("the outputs do not show the redacted parameters (api_key=xxxxx, password=xxxxx):\n%s", all)
	}
	for _, s := range secrets {
		for _, out := range outputs {
			if i := strings.Index(out, s); i >= 0 {
				t.Errorf("secret %s printed: …%s…", s, out[max(0, i-80):min(len(out), i+40)])
				break
			}
		}
	}
}
