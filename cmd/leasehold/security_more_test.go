package main

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/daemon"
	"github.com/leasehold/leasehold/daemon/admin"
)

// "leasehold status --config c.yaml" reads the daemon's generated
// admin token from the file next to the config's database, but sends it to
// --api's default, http://127.0.0.1:7070, not to the config's http.listen.
// Any local user who binds 127.0.0.1:7070 (the daemon listens elsewhere, or
// is down) receives the admin token (promise 4: a local user who cannot
// read the file gets 401, never the token).
func TestStatusSendsGeneratedTokenToOtherListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:7070")
	if err != nil {
		t.Skipf("127.0.0.1:7070 busy: %v", err)
	}
	var mu sync.Mutex
	var got string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Get("Authorization")
		mu.Unlock()
		http.Error(w, `{"error":"nope"}`, http.StatusInternalServerError)
	})}
	go srv.Serve(ln)
	defer srv.Close()

	e := newEnv(t)
	db := e.path("leasehold.db") // the backend e.run passes
	const secret = "generated-admin-token-0123456789abcdefABCDEF"
	if err := os.WriteFile(db+".admin-token", []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := e.path("c.yaml")
	if err := os.WriteFile(cfg, []byte("backend: sqlite://"+db+"\nhttp:\n  listen: 127.0.0.1:7171\njobs:\n  - name: a\n    schedule: \"@daily\"\n    command: {argv: [\"true\"]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := e.run("status", "--config", cfg)
	t.Logf("status: %d %s", r.code, r.stderr)
	// Every request status sent has been handled once Shutdown returns.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("the listener on 127.0.0.1:7070 did not finish its requests: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(got, secret) {
		t.Errorf("status --config (daemon listens on 127.0.0.1:7171) sent the generated admin token to whoever listens on 127.0.0.1:7070: Authorization %q", got[:20]+"…")
	}
}

// "leasehold status --api http://user:PASSWORD@host:port" (basic
// auth in front of the API) fails to connect; Go's url.Error masks the
// password, but the hint "(is \"leasehold run\" running with --http …?)"
// repeats the URL without its scheme — "user:PASSWORD@host:port" — which the
// "://"-anchored userinfo pattern does not match and no scrubber knows
// (promise 2: URL userinfo never in CLI errors).
func TestStatusErrorRepeatsAPIPassword(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	const pw = "apiProxyPw-9f3k2"
	e := newEnv(t)
	r := e.run("status", "--token", "some-token-0123456789abcdef0123", "--api", "http://admin:"+pw+"@"+addr+"/")
	if strings.Contains(r.stdout+r.stderr, pw) {
		t.Errorf("exit %d; the CLI error shows the --api URL's password: %s", r.code, strings.TrimSpace(r.stderr))
	}
}

// TestStatusRefusesGeneratedTokenForOtherAPI: with --config naming
// http.listen, an --api elsewhere gets no token read from the token file:
// status refuses (exit 64) before connecting, and says to give --token; a
// token given with --token goes to --api. A token as the --api URL's user
// name is not printed either.
func TestStatusRefusesGeneratedTokenForOtherAPI(t *testing.T) {
	t.Setenv(EnvAPIToken, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, `{"error":"nope"}`, http.StatusInternalServerError)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	other := "http://" + ln.Addr().String()

	e := newEnv(t)
	db := e.path("leasehold.db")
	const secret = "generated-admin-token-0123456789abcdefABCDEF"
	if err := os.WriteFile(db+".admin-token", []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := e.path("c.yaml")
	if err := os.WriteFile(cfg, []byte("backend: sqlite://"+db+"\nhttp:\n  listen: 127.0.0.1:7171\njobs:\n  - name: a\n    schedule: \"@daily\"\n    command: {argv: [\"true\"]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := e.expect(ExitUsage, "status", "--config", cfg, "--api", other)
	if !strings.Contains(r.stderr, "--token") || !strings.Contains(r.stderr, "http://127.0.0.1:7171") {
		t.Errorf("refusal does not name the listener and --token: %s", r.stderr)
	}
	mu.Lock()
	if len(got) != 0 {
		t.Errorf("status sent %d requests to the other --api", len(got))
	}
	mu.Unlock()
	e.expect(ExitInternal, "status", "--config", cfg, "--api", other, "--token", "explicit-token-0123456789abcdef")
	mu.Lock()
	if len(got) != 1 || got[0] != "Bearer explicit-token-0123456789abcdef" {
		t.Errorf("requests to --api with --token: %q", got)
	}
	mu.Unlock()
	// A token as the --api URL's user name: not in the error.
	const userTok = "ghp_userTok0123456789abcdef"
	r = e.run("status", "--token", "some-token-0123456789abcdef0123", "--api", "http://"+userTok+"@"+freeAddr(t)+"/")
	if r.code != ExitInternal || strings.Contains(r.stdout+r.stderr, userTok) {
		t.Errorf("exit %d; the --api URL's user name is shown: %s", r.code, r.stderr)
	}
}

// TestConfigListener: the API URL status derives from a config, and which
// --api URLs reach it.
func TestConfigListener(t *testing.T) {
	for _, c := range []struct {
		listen, cert, want string
	}{
		{"", "", "http://" + admin.DefaultAddress},
		{"127.0.0.1:7171", "", "http://127.0.0.1:7171"},
		{"127.0.0.1:7171", "/c.pem", "https://127.0.0.1:7171"},
		{"0.0.0.0:7171", "", "http://127.0.0.1:7171"},
		{":7171", "", "http://127.0.0.1:7171"},
		{"[::]:7171", "", "http://[::1]:7171"},
		{"localhost:7171", "", "http://localhost:7171"},
		{"off", "", ""},
		{"127.0.0.1:0", "", ""},
	} {
		cfg := &daemon.Config{}
		cfg.HTTP.Listen, cfg.HTTP.TLSCert = c.listen, c.cert
		u, err := configListener(cfg)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("listen %q: %v, want an error", c.listen, u)
		case c.want != "" && (err != nil || u.String() != c.want):
			t.Errorf("listen %q: %v, %v; want %s", c.listen, u, err, c.want)
		}
	}
	l, _ := url.Parse("http://127.0.0.1:7171")
	for api, want := range map[string]bool{
		"http://127.0.0.1:7171": true, "http://127.0.0.1:7171/": true, "http://u:p@127.0.0.1:7171": true,
		"http://127.0.0.1:7070": false, "https://127.0.0.1:7171": false, "http://localhost:7171": false, "http://127.0.0.1": false,
	} {
		u, _ := url.Parse(api)
		if got := sameListener(u, l); got != want {
			t.Errorf("sameListener(%s, %s) = %v", api, l, got)
		}
	}
	l6, _ := url.Parse("http://[::1]:7171")
	if u, _ := url.Parse("http://[0:0:0:0:0:0:0:1]:7171"); !sameListener(u, l6) {
		t.Errorf("::1 in another notation is not the same listener")
	}
	if u, _ := url.Parse("https://h"); !sameListener(u, &url.URL{Scheme: "https", Host: "h:443"}) {
		t.Errorf("the default port of https")
	}
}
