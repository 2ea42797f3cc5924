package main

import (
	"bufio"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
)

// squatter listens on a loopback port before any daemon and records the
// Authorization headers it is sent; it answers every request 200 with an
// empty JSON object, as a listener pretending to be the daemon would.
type squatter struct {
	ln   net.Listener
	mu   sync.Mutex
	auth []string
}

func newSquatter(t *testing.T) *squatter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &squatter{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					s.mu.Lock()
					s.auth = append(s.auth, req.Header.Get("Authorization"))
					s.mu.Unlock()
					_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"))
				}
			}()
		}
	}()
	return s
}

func (s *squatter) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// TestCLISendsNoTokenToSquatter (issue 27 item 2): another local user
// binds the daemon's admin address before the daemon does. "leasehold
// status/pause --config" must not send it the admin token read from the
// daemon's token file (nor a token of the config): the listener has to
// prove it is the daemon holding that token first, and cannot.
func TestCLISendsNoTokenToSquatter(t *testing.T) {
	e := newEnv(t)
	e.bare = true // the backend (and so the token file) of --config
	sq := newSquatter(t)
	db := e.path("lh.db")
	conf := e.path("leasehold.yaml")
	if err := os.WriteFile(conf, []byte("backend: sqlite://"+db+"\nhttp: {listen: \""+sq.ln.Addr().String()+"\"}\njobs:\n  - name: tick\n    schedule: \"@every 1h\"\n    command: {argv: [/bin/true]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const secret = "generated-admin-token-0123456789abcdef"
	if err := os.WriteFile(db+".admin-token", []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"status", "--config", conf},
		{"pause", "tick", "--config", conf},
		{"trigger", "tick", "--config", conf},
	} {
		r := e.run(args...)
		if r.code == 0 {
			t.Errorf("%v against a squatter: exit 0, want an error saying the listener is not the daemon\n%s", args, r.stdout)
		}
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("%v printed the token", args)
		}
		t.Logf("%v: exit %d: %s", args, r.code, strings.TrimSpace(r.stderr))
	}
	t.Logf("squatter received Authorization headers %q", sq.received())
	for _, h := range sq.received() {
		if strings.Contains(h, secret) {
			t.Fatalf("the squatter received the admin token: %q", h)
		}
	}
}
