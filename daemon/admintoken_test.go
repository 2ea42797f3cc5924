package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testkit"
)

// startWithLog runs a daemon of yml over the SQLite file db until the test
// ends and returns it once ready, with its log.
func startWithLog(t *testing.T, dir, db, yml string) (*Daemon, *testkit.Buffer) {
	t.Helper()
	cfg, err := Parse(filepath.Join(dir, "leasehold.yaml"), []byte("backend: sqlite://"+db+"\n"+yml))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testkit.Buffer{}
	d, err := New(cfg, b, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; b.Close() })
	select {
	case <-d.Ready():
	case err := <-done:
		done <- err
		t.Fatalf("daemon stopped: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("daemon not ready in 20s")
	}
	return d, logs
}

func status(t *testing.T, method, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

const tokenJobs = `
instance: %s
http:
  listen: 127.0.0.1:0
jobs:
  - name: tick
    schedule: "@every 1h"
    command: {argv: ["true"]}
`

// TestAdminTokenGeneratedOnFirstStart (issue 18 item 4): with no admin
// token configured, the first daemon generates one into a 0600 file next
// to the database and the API needs it for actions and reads; later
// daemons on the database read the same file; the log never shows it.
func TestAdminTokenGeneratedOnFirstStart(t *testing.T) {
	t.Setenv(EnvAdminToken, "")
	t.Setenv(EnvReadToken, "")
	dir := t.TempDir()
	db := filepath.Join(dir, "d.db")
	d, logs := startWithLog(t, dir, db, strings.Replace(tokenJobs, "%s", "t1", 1))
	path, secret, created := d.AdminToken()
	if path != db+".admin-token" || !created || len(secret) < 32 {
		t.Fatalf("AdminToken = %q, %d bytes, created %v; want %q, ≥ 32 bytes, created", path, len(secret), created, db+".admin-token")
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file %s: %v, mode %v; want 0600", path, err, fi.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	if strings.TrimSpace(string(data)) != secret {
		t.Fatalf("the file holds another token than the daemon uses")
	}
	base := "http://" + d.AdminAddr().String()
	for _, c := range []struct {
		method, path, token string
		want                int
	}{
		{"POST", "/api/v1/jobs/tick/pause", "", http.StatusUnauthorized},
		{"POST", "/api/v1/leaders/schedule%2Fleader/resign", "", http.StatusUnauthorized},
		{"GET", "/api/v1/status", "", http.StatusUnauthorized},
		{"POST", "/api/v1/jobs/tick/pause", secret, http.StatusOK},
		{"POST", "/api/v1/jobs/tick/resume", secret, http.StatusOK},
		{"GET", "/api/v1/status", secret, http.StatusOK},
		{"GET", "/healthz", "", http.StatusOK},
	} {
		if got := status(t, c.method, base+c.path, c.token); got != c.want {
			t.Errorf("%s %s (token given: %v) = %d, want %d", c.method, c.path, c.token != "", got, c.want)
		}
	}
	// A second daemon on the same database uses the same token.
	d2, logs2 := startWithLog(t, dir, db, strings.Replace(tokenJobs, "%s", "t2", 1))
	if p2, s2, created2 := d2.AdminToken(); p2 != path || s2 != secret || created2 {
		t.Fatalf("second daemon: AdminToken = %q, same secret %v, created %v", p2, s2 == secret, created2)
	}
	for _, l := range []string{logs.String(), logs2.String()} {
		if strings.Contains(l, secret) {
			t.Fatalf("the log shows the admin token:\n%s", l)
		}
		if !strings.Contains(l, path) {
			t.Errorf("the log does not name the token file %s:\n%s", path, l)
		}
	}
}

// TestOpenReadsAndTokenFileChecks: http.open_reads lets GETs through on
// loopback without a token while actions still need one; open_reads on a
// listener that is not loopback, and a token file others may read, are
// refused naming the field or file.
func TestOpenReadsAndTokenFileChecks(t *testing.T) {
	t.Setenv(EnvAdminToken, "")
	t.Setenv(EnvReadToken, "")
	dir := t.TempDir()
	db := filepath.Join(dir, "d.db")
	d, _ := startWithLog(t, dir, db, strings.Replace(strings.Replace(tokenJobs, "%s", "o1", 1), "jobs:", "  open_reads: true\njobs:", 1))
	base := "http://" + d.AdminAddr().String()
	if got := status(t, "GET", base+"/api/v1/status", ""); got != http.StatusOK {
		t.Errorf("GET status with open_reads and no token = %d, want 200", got)
	}
	if got := status(t, "POST", base+"/api/v1/jobs/tick/pause", ""); got != http.StatusUnauthorized {
		t.Errorf("POST pause with open_reads and no token = %d, want 401", got)
	}
	_, err := Parse("c.yaml", []byte("http:\n  listen: 0.0.0.0:7070\n  open_reads: true\n  tokens:\n    - {scope: admin, token: admin-token-0123456789}\n"))
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "http.open_reads") || !strings.Contains(err.Error(), "0.0.0.0:7070") {
		t.Errorf("open_reads on 0.0.0.0 = %v, want ErrConfig naming http.open_reads and the address", err)
	}
	// A token file readable by others is refused.
	dir2 := t.TempDir()
	db2 := filepath.Join(dir2, "e.db")
	if err := os.WriteFile(db2+".admin-token", []byte("world-readable-token-0123456789\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(filepath.Join(dir2, "leasehold.yaml"), []byte("backend: sqlite://"+db2+"\n"+strings.Replace(tokenJobs, "%s", "o2", 1)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sqlite.Open(context.Background(), db2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := New(cfg, b, nil); err == nil || !strings.Contains(err.Error(), db2+".admin-token") || !strings.Contains(err.Error(), "0644") {
		t.Errorf("New with a 0644 token file = %v, want an error naming the file and its mode", err)
	}
}

// TestConcurrentTokenCreation: daemons starting at once on one database
// end with one token, created by exactly one of them.
func TestConcurrentTokenCreation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.db"+AdminTokenSuffix)
	const n = 16
	var wg sync.WaitGroup
	secrets := make([]string, n)
	created := make([]bool, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			secrets[i], created[i], errs[i] = loadOrCreateToken(path)
		}()
	}
	close(start)
	wg.Wait()
	creators := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("loadOrCreateToken: %v", errs[i])
		}
		if secrets[i] != secrets[0] {
			t.Fatalf("two tokens: %d bytes and %d bytes", len(secrets[i]), len(secrets[0]))
		}
		if created[i] {
			creators++
		}
	}
	if creators != 1 {
		t.Fatalf("%d callers created the file, want 1", creators)
	}
	left, _ := filepath.Glob(path + ".tmp-*")
	if len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
