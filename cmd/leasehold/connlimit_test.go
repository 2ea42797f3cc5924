package main

import (
	"encoding/json"
	"fmt"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"net"
	"os"
	"testing"
	"time"
)

// TestListenerFloodDoesNotStarveJobs (issue 18 item 5): a daemon with a
// low open-file limit whose admin listener is flooded with idle
// connections keeps running its command jobs: the listener takes at most
// its cap of connections (the rest wait in the kernel's backlog), so the
// jobs still get the descriptors they need (/dev/null, pipes).
func TestListenerFloodDoesNotStarveJobs(t *testing.T) {
	e := newEnv(t)
	conf := e.path("leasehold.yaml")
	if err := os.WriteFile(conf, []byte(`grace: 2s
jobs:
  - name: tick
    schedule: "@every 200ms"
    lease_ttl: 2s
    command: {argv: [/bin/true]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	// The daemon under "ulimit -n 128" (soft and hard, so Go cannot raise it).
	cmd := e.command("run", "--config", conf, "--instance", "flood", "--http", addr)
	cmd.Args = append([]string{"sh", "-c", `ulimit -n 128 && exec "$0" "$@"`}, cmd.Args...)
	cmd.Path = "/bin/sh"
	p := &proc{cmd: cmd, done: make(chan struct{})}
	p.cmd.Stderr = &p.stderr
	p.cmd.WaitDelay = time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.done })
	runsAfter := func(since time.Time) (ok, failed []runInfo) {
		r := e.run("runs", "--job", "tick", "--json", "--limit", "200")
		var rows []runInfo
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rows) != nil {
			return nil, nil
		}
		for _, row := range rows {
			at, err := time.Parse(time.RFC3339Nano, row.ScheduledAt)
			if err != nil || !at.After(since) {
				continue
			}
			switch row.State {
			case "succeeded":
				ok = append(ok, row)
			case "failed":
				failed = append(failed, row)
			}
		}
		return ok, failed
	}
	eventually.True(t, 30*time.Second, "the first runs and the API", func() bool {
		ok, _ := runsAfter(time.Time{})
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return len(ok) > 0 && err == nil
	})

	// 200 idle keep-alive connections, each after one request.
	flood := time.Now()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 200 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		conns = append(conns, c)
	}
	eventually.True(t, 60*time.Second, "8 runs after the flood", func() bool {
		ok, failed := runsAfter(flood)
		if len(failed) > 0 {
			t.Fatalf("a run failed while the listener was flooded: %s; daemon stderr:\n%s", failed[0].Error, tail(p.stderr.String(), 2000))
		}
		return len(ok) >= 8
	})
	// Once the idle connections go, the API answers again.
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	eventually.True(t, 60*time.Second, "the API answering after the flood", func() bool {
		return apiAnswers(addr)
	})
	select {
	case <-p.done:
		t.Fatalf("the daemon exited: %v; stderr: %s", p.err, tail(p.stderr.String(), 2000))
	default:
	}
}

func apiAnswers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addr)
	buf := make([]byte, 12)
	n, _ := c.Read(buf)
	return n >= 12 && string(buf[9:12]) == "200"
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
