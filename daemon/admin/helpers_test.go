package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/daemon"
	"github.com/leasehold/leasehold/internal/testkit"
)

// node is a real daemon (daemon.Daemon, in process) serving its admin API
// on a free loopback port.
type node struct {
	t      *testing.T
	d      *daemon.Daemon
	url    string
	cancel context.CancelFunc
	done   chan error
	log    *testkit.Buffer
	client *http.Client
	token  string // sent as the bearer token when not ""
}

// jobsYAML: a fast job in once mode and one in leader mode.
const jobsYAML = `
grace: 2s
jobs:
  - name: %[1]s-tick
    schedule: "@every 300ms"
    lease_ttl: 2s
    command: {argv: [/bin/true]}
  - name: %[1]s-lead
    schedule: "@every 500ms"
    mode: leader
    lease_ttl: 2s
    command: {argv: [/bin/true]}
`

// startNode starts a daemon with config text conf (instance and namespace
// set here) on b.
func startNode(t *testing.T, b backend.Backend, instance, namespace, conf string) *node {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leasehold.yaml")
	cfg, err := daemon.Parse(path, []byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Instance, cfg.Namespace = instance, namespace
	if cfg.HTTP.Listen == "127.0.0.1:7070" {
		cfg.SetListen("127.0.0.1:0")
	}
	logs := &testkit.Buffer{}
	log, err := daemon.NewLogger(logs, "json", "debug")
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(cfg, b, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{t: t, d: d, cancel: cancel, done: make(chan error, 1), log: logs, client: &http.Client{Timeout: 20 * time.Second}}
	go func() { n.done <- d.Run(ctx) }()
	select {
	case <-d.Ready():
	case err := <-n.done:
		t.Fatalf("daemon %s stopped at start: %v", instance, err)
	case <-time.After(20 * time.Second):
		t.Fatalf("daemon %s not ready within 20 s", instance)
	}
	n.url = "http://" + d.AdminAddr().String()
	// With no admin token configured the daemon generated one: the test's
	// requests send it, as "leasehold status" does.
	_, n.token, _ = d.AdminToken()
	t.Cleanup(n.stop)
	return n
}

func (n *node) stop() {
	n.cancel()
	select {
	case err := <-n.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			n.t.Errorf("daemon stopped with %v", err)
		}
		n.done <- nil // later stops return at once
	case <-time.After(30 * time.Second):
		n.t.Errorf("daemon did not stop within 30 s")
	}
}

// call makes a request and decodes a JSON answer into out (if not nil).
func (n *node) call(method, path string, out any) (int, map[string]any) {
	n.t.Helper()
	req, err := http.NewRequest(method, n.url+path, nil)
	if err != nil {
		n.t.Fatal(err)
	}
	if n.token != "" {
		req.Header.Set("Authorization", "Bearer "+n.token)
	}
	resp, err := n.client.Do(req)
	if err != nil {
		n.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	if out != nil && resp.StatusCode/100 == 2 {
		// Decode afresh: into a reused value, fields absent from the JSON
		// would keep their old values.
		v := reflect.ValueOf(out).Elem()
		v.Set(reflect.Zero(v.Type()))
		if err := json.Unmarshal(body, out); err != nil {
			n.t.Fatalf("%s %s: %v in %s", method, path, err, body)
		}
	}
	return resp.StatusCode, m
}

func (n *node) mustGet(path string, out any) {
	n.t.Helper()
	if code, m := n.call("GET", path, out); code != http.StatusOK {
		n.t.Fatalf("GET %s = %d %v", path, code, m)
	}
}

func inCI() bool { return os.Getenv("CI") == "true" }

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func lines(s string) []string { return strings.Split(strings.TrimSpace(s), "\n") }
