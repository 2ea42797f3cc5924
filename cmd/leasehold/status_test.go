package main

import (
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/daemon"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestStatusAgainstDaemon runs "leasehold status" against a real daemon
// process that requires a token.
func TestStatusAgainstDaemon(t *testing.T) {
	e := newEnv(t)
	const secret = "status-test-token-0123456789"
	t.Setenv(daemon.EnvReadToken, secret) // inherited by the daemon
	conf := e.path("leasehold.yaml")
	if err := os.WriteFile(conf, []byte(`grace: 2s
jobs:
  - name: tick
    schedule: "@every 300ms"
    lease_ttl: 2s
    command: {argv: [/bin/true]}
  - name: lead
    schedule: "@every 1h"
    mode: leader
    command: {argv: [/bin/true]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	e.start("run", "--config", conf, "--instance", "s1", "--http", addr, "--log-format", "json")
	api := "http://" + addr
	var st admin.Status
	eventually.True(t, 30*time.Second, "status showing runs and the leader", func() bool {
		r := e.run("status", "--api", api, "--token", secret, "--json", "--runs", "3")
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil || len(st.Leaders) != 1 {
			return false
		}
		for _, run := range st.Runs {
			if run.State == "succeeded" { // not only one still running
				return true
			}
		}
		return false
	})
	r := e.expect(0, "status", "--api", api, "--token", secret)
	for _, want := range []string{"namespace default, served by s1", "INSTANCE", "s1 (this)", "alive", "schedule/leader", "instances/s1",
		"tick", "@every 300ms", "succeeded", "SCHEDULED (UTC)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status output lacks %q:\n%s", want, r.stdout)
		}
	}
	// The token from the environment.
	t.Setenv(EnvAPIToken, secret)
	e.expect(0, "status", "--api", api)
	t.Setenv(EnvAPIToken, "")
	// Without a token (and no token file next to the backend given), or
	// with a wrong one: the API's error, exit 70.
	r = e.expect(ExitInternal, "--backend", "sqlite://"+e.path("other.db"), "status", "--api", api)
	if !strings.Contains(r.stderr, "401") || !strings.Contains(r.stderr, "bearer token is required") || !strings.Contains(r.stderr, "other.db.admin-token") {
		t.Errorf("status without a token: %s", r.stderr)
	}
	r = e.expect(ExitInternal, "status", "--api", api, "--token", "wrong-token-0123456789")
	if strings.Contains(r.stderr, "wrong-token") {
		t.Errorf("the token was printed: %s", r.stderr)
	}
	// Bad flags: usage errors naming the flag and value.
	r = e.expect(ExitUsage, "status", "--api", "ftp://x")
	if !strings.Contains(r.stderr, `--api "ftp://x"`) {
		t.Errorf("bad --api: %s", r.stderr)
	}
	e.expect(ExitUsage, "status", "--api", api, "--runs", "-1")
	// Nothing listening.
	r = e.expect(ExitInternal, "status", "--api", "http://"+freeAddr(t))
	if !strings.Contains(r.stderr, "admin API") {
		t.Errorf("status against nothing: %s", r.stderr)
	}
}
