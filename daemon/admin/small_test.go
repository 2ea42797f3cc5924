package admin_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/daemon"
)

// TestAllowHeaderListsOnlyServedMethods (issue 18 item 9): a 405 answer's
// Allow header names HEAD only where HEAD is served (on GET routes), not
// on POST-only routes, which refuse it.
func TestAllowHeaderListsOnlyServedMethods(t *testing.T) {
	n := startNode(t, memory.New(), "d1", "default", jobsYAML[:0]+"grace: 2s\njobs:\n  - {name: a-tick, schedule: \"@every 1h\", command: {argv: [/bin/true]}}\n")
	do := func(method, path string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, n.url+path, nil)
		if n.token != "" {
			req.Header.Set("Authorization", "Bearer "+n.token)
		}
		resp, err := n.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, p := range []string{"/api/v1/jobs/a-tick/trigger", "/api/v1/jobs/a-tick/pause", "/api/v1/leaders/x/resign"} {
		resp := do("HEAD", p)
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
			t.Errorf("HEAD %s = %d, Allow %q; want 405 with Allow \"POST\"", p, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
	resp := do("DELETE", "/api/v1/jobs")
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("DELETE /api/v1/jobs = %d, Allow %q; want 405 with Allow \"GET, HEAD\"", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if resp := do("HEAD", "/api/v1/jobs"); resp.StatusCode != http.StatusOK {
		t.Errorf("HEAD /api/v1/jobs = %d, want 200 (Allow says HEAD is served)", resp.StatusCode)
	}
}

// TestRelativeTLSPathsResolveAgainstTheConfig (issue 18 item 9): relative
// tls_cert and tls_key are files next to the config file, not in the
// daemon's working directory.
func TestRelativeTLSPathsResolveAgainstTheConfig(t *testing.T) {
	certFile, keyFile, _ := writeCert(t)
	dir := filepath.Dir(certFile)
	conf := filepath.Join(dir, "leasehold.yaml")
	yml := "http:\n  listen: 127.0.0.1:0\n  tls_cert: " + filepath.Base(certFile) + "\n  tls_key: " + filepath.Base(keyFile) + "\n" +
		"jobs:\n  - {name: a, schedule: \"@every 1h\", command: {argv: [/bin/true]}}\n"
	if err := os.WriteFile(conf, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := daemon.Load(conf)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP.TLSCert != certFile || cfg.HTTP.TLSKey != keyFile {
		t.Errorf("tls_cert %q, tls_key %q; want %q and %q", cfg.HTTP.TLSCert, cfg.HTTP.TLSKey, certFile, keyFile)
	}
	if _, err := daemon.New(cfg, memory.New(), nil); err != nil {
		t.Fatalf("New with relative TLS files next to the config: %v", err)
	}
}
