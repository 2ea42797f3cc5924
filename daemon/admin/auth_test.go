package admin_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/daemon"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

const (
	readSecret  = "read-token-0123456789abcdef"
	adminSecret = "admin-token-0123456789abcdef"
)

// every route of the API, with the scope it needs.
var apiRoutes = []struct {
	method, path string
	admin        bool
}{
	{"GET", "/api/v1/status", false},
	{"GET", "/api/v1/instances", false},
	{"GET", "/api/v1/leaders", false},
	{"GET", "/api/v1/locks", false},
	{"GET", "/api/v1/jobs", false},
	{"GET", "/api/v1/jobs/a-tick", false},
	{"GET", "/api/v1/runs", false},
	{"POST", "/api/v1/jobs/a-tick/trigger", true},
	{"POST", "/api/v1/jobs/a-tick/pause", true},
	{"POST", "/api/v1/jobs/a-tick/resume", true},
	{"POST", "/api/v1/leaders/schedule%2Fleader/resign", true},
}

// TestAuth: with tokens configured (one from the config file, one from the
// environment), every endpoint refuses no token, a wrong token and a token
// of the wrong scope; failed attempts are logged without the token.
func TestAuth(t *testing.T) {
	t.Setenv(daemon.EnvReadToken, readSecret)
	conf := fmt.Sprintf(jobsYAML, "a") + fmt.Sprintf("http:\n  tokens:\n    - {scope: admin, token: %q}\n", adminSecret)
	n := startNode(t, memory.New(), "d1", "default", conf)

	for _, rt := range apiRoutes {
		for _, c := range []struct {
			name, header string
			want         int
		}{
			{"no token", "", http.StatusUnauthorized},
			{"wrong token", "Bearer not-the-token-0123456789", http.StatusUnauthorized},
			{"malformed", "Basic " + adminSecret, http.StatusUnauthorized},
			{"read token", "Bearer " + readSecret, map[bool]int{true: http.StatusForbidden, false: http.StatusOK}[rt.admin]},
		} {
			req, _ := http.NewRequest(rt.method, n.url+rt.path, nil)
			if c.header != "" {
				req.Header.Set("Authorization", c.header)
			}
			resp, err := n.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Errorf("%s %s with %s = %d, want %d", rt.method, rt.path, c.name, resp.StatusCode, c.want)
			}
			if c.want == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s with %s: no WWW-Authenticate: Bearer", rt.method, rt.path, c.name)
			}
		}
	}
	// The admin token may do everything (resign: 200 or 409 depending on
	// whether d1 leads at that moment — never 401/403).
	n.token = adminSecret
	for _, rt := range apiRoutes {
		code, m := n.call(rt.method, rt.path, nil)
		if code == http.StatusUnauthorized || code == http.StatusForbidden || code >= 500 {
			t.Errorf("%s %s with the admin token = %d %v", rt.method, rt.path, code, m)
		}
	}
	// Public: no data.
	n.token = ""
	for _, p := range []string{"/", "/openapi.yaml", "/dashboard/app.js"} {
		if code, _ := n.call("GET", p, nil); code != http.StatusOK {
			t.Errorf("GET %s without a token = %d", p, code)
		}
	}
	eventually.True(t, 20*time.Second, "a run logged", func() bool { return strings.Contains(n.log.String(), `"msg":"run finished"`) })
	logs := n.log.String()
	if !strings.Contains(logs, "request refused") || !strings.Contains(logs, "unknown token") || !strings.Contains(logs, "lacks admin") {
		t.Fatalf("failed attempts not logged:\n%s", logs)
	}
	// Structured logs: every line has the instance id; run lines have the
	// job, the occurrence and the token.
	runLines := 0
	for _, line := range lines(logs) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %s", line)
		}
		if m["instance"] != "d1" {
			t.Errorf("log line without the instance id: %s", line)
		}
		if m["msg"] == "run finished" {
			runLines++
			if m["job"] == nil || m["at"] == nil || m["token"] == nil {
				t.Errorf("run line without job, occurrence or token: %s", line)
			}
		}
	}
	if runLines == 0 {
		t.Errorf("no run was logged:\n%s", logs)
	}
	for _, secret := range []string{readSecret, adminSecret, "not-the-token-0123456789"} {
		if strings.Contains(logs, secret) {
			t.Fatalf("the log contains a token")
		}
	}
}

// TestListenerNeedsTokens: a listener that is not loopback without a token
// is refused, by admin.New and by the daemon's config.
func TestListenerNeedsTokens(t *testing.T) {
	sched, err := schedule.New(memory.New(), schedule.WithInstance("x"))
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"0.0.0.0:7070", ":7070", "192.0.2.1:7070", "[::]:7070", "example.com:7070"} {
		if _, err := admin.New(memory.New(), sched, admin.WithAddress(addr)); !errors.Is(err, admin.ErrInsecure) || !strings.Contains(err.Error(), addr) {
			t.Errorf("New(%q, no tokens) = %v, want ErrInsecure naming the address", addr, err)
		}
		if _, err := admin.New(memory.New(), sched, admin.WithAddress(addr), admin.WithTokens(admin.Token{Secret: adminSecret, Scope: admin.ScopeAdmin})); err != nil {
			t.Errorf("New(%q, a token) = %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:7070", "localhost:0", "[::1]:7070", "127.1.2.3:80"} {
		if _, err := admin.New(memory.New(), sched, admin.WithAddress(addr)); err != nil {
			t.Errorf("New(%q) = %v", addr, err)
		}
	}
	for _, c := range []struct {
		tok  admin.Token
		want string
	}{
		{admin.Token{Secret: "short", Scope: admin.ScopeRead}, "tokens[0].secret"},
		{admin.Token{Secret: adminSecret, Scope: "root"}, `tokens[0].scope: "root"`},
	} {
		_, err := admin.New(memory.New(), sched, admin.WithTokens(c.tok))
		if !errors.Is(err, admin.ErrConfig) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), c.tok.Secret) && c.tok.Secret != "short" {
			t.Errorf("New(%v) = %v, want ErrConfig naming %s", c.tok, err, c.want)
		}
	}
	// Through the daemon's config file.
	cfg, err := daemon.Parse("/tmp/x.yaml", []byte(fmt.Sprintf(jobsYAML, "a")+"http: {listen: \"0.0.0.0:7070\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := daemon.New(cfg, memory.New(), discard); !errors.Is(err, admin.ErrInsecure) || !strings.Contains(err.Error(), `"0.0.0.0:7070"`) {
		t.Fatalf("daemon.New with a public listener and no token = %v", err)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"http: {tokens: [{scope: admin, token: short}]}", "http.tokens[0].token"},
		{"http: {tokens: [{scope: god, token: " + adminSecret + "}]}", `http.tokens[0].scope: "god"`},
		{"http: {tls_cert: /a.pem}", "tls_key"},
		{"log: {format: xml}", `log.format: "xml"`},
		{"log: {level: loud}", `log.level: "loud"`},
	} {
		_, err := daemon.Parse("/tmp/x.yaml", []byte(fmt.Sprintf(jobsYAML, "a")+bad.yaml+"\n"))
		if !errors.Is(err, daemon.ErrConfig) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Parse(%s) = %v, want an error naming %s", bad.yaml, err, bad.want)
		}
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 and its key.
func writeCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "leasehold test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestTLS serves the API over TLS with a generated certificate: a client
// trusting it gets answers, plain HTTP does not.
func TestTLS(t *testing.T) {
	certFile, keyFile, pool := writeCert(t)
	sched, err := schedule.New(memory.New(), schedule.WithInstance("x"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := admin.New(memory.New(), sched, admin.WithAddress("127.0.0.1:0"), admin.WithTLS(certFile, keyFile),
		admin.WithTokens(admin.Token{Secret: readSecret, Scope: admin.ScopeRead}))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest("GET", "https://"+ln.Addr().String()+"/api/v1/jobs", nil)
	req.Header.Set("Authorization", "Bearer "+readSecret)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil {
		t.Fatalf("GET over TLS = %d (TLS %v)", resp.StatusCode, resp.TLS != nil)
	}
	plain, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + ln.Addr().String() + "/api/v1/jobs")
	if err == nil {
		plain.Body.Close()
		if plain.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP was answered 200 by a TLS listener")
		}
	}
	if _, err := admin.New(memory.New(), sched, admin.WithTLS(certFile, "")); !errors.Is(err, admin.ErrConfig) {
		t.Fatalf("TLS without key = %v", err)
	}
	if _, err := admin.New(memory.New(), sched, admin.WithTLS(keyFile, certFile)); !errors.Is(err, admin.ErrConfig) || !strings.Contains(err.Error(), keyFile) {
		t.Fatalf("TLS with swapped files = %v", err)
	}
}
