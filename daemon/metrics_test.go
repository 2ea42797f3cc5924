package daemon

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// TestDaemonServesMetricsAndHealth runs a daemon with one job over SQLite
// and reads /metrics, /healthz and /readyz from its admin listener.
func TestDaemonServesMetricsAndHealth(t *testing.T) {
	yml := `
instance: d1
namespace: shop
http:
  listen: 127.0.0.1:0
jobs:
  - name: tick
    schedule: "@every 100ms"
    command:
      argv: ["true"]
`
	d := runDaemon(t, yml)
	base := "http://" + d.AdminAddr().String()
	_, token, _ := d.AdminToken() // generated: none is configured
	get := func(path string) (int, string) {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := get(p); code != 200 {
			t.Fatalf("%s = %d %s", p, code, body)
		}
	}
	want := []string{
		`leasehold_runs_total{job="tick",namespace="shop",result="succeeded"}`,
		`leasehold_claims_total{job="tick",namespace="shop",result="won"}`,
		// the daemon's instance-id lock
		`leasehold_acquire_duration_seconds_count{backend="sqlite",kind="lock",namespace="shop",result="ok"} 1`,
	}
	var (
		code          int
		body, missing string
	)
	if !eventually.Within(20*time.Second, func() bool {
		code, body = get("/metrics")
		missing = ""
		for _, w := range want {
			if !strings.Contains(body, w) {
				missing = w
				break
			}
		}
		return code == 200 && missing == ""
	}) {
		t.Fatalf("/metrics (%d) lacks %s after 20s:\n%s", code, missing, body)
	}
}

// TestMetricsNeedTheReadToken: once the admin listener has tokens,
// /metrics needs one with the read scope; the probes stay open.
func TestMetricsNeedTheReadToken(t *testing.T) {
	const secret = "read-token-0123456789abcdef"
	yml := `
instance: d1
http:
  listen: 127.0.0.1:0
  tokens:
    - {scope: read, token: ` + secret + `}
jobs:
  - name: tick
    schedule: "@every 1h"
    command:
      argv: ["true"]
`
	d := runDaemon(t, yml)
	base := "http://" + d.AdminAddr().String()
	status := func(path, token string) int {
		req, _ := http.NewRequest("GET", base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", "wrong-token-0123456789abcdef", http.StatusUnauthorized},
		{"/metrics", secret, http.StatusOK},
		{"/healthz", "", http.StatusOK},
		{"/readyz", "", http.StatusOK},
	} {
		if got := status(c.path, c.token); got != c.want {
			t.Errorf("GET %s (token given: %v): %d, want %d", c.path, c.token != "", got, c.want)
		}
	}
}

// runDaemon parses yml, runs the daemon over a SQLite file until the test
// ends, and returns it once its admin listener is ready.
func runDaemon(t *testing.T, yml string) *Daemon {
	t.Helper()
	dir := t.TempDir()
	cfg, err := Parse(filepath.Join(dir, "leasehold.yaml"), []byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sqlite.Open(context.Background(), filepath.Join(dir, "d.db"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, b, nil)
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		b.Close()
	})
	select {
	case <-d.Ready():
	case err := <-done:
		done <- nil // for the cleanup, which waits on done
		t.Fatalf("daemon stopped: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("daemon not ready in 20s")
	}
	return d
}
