package admin_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/schedule"
)

// TestIdleProbeClientsDoNotLockOutAdmin (issue 27 item 8): clients that
// each send a /healthz now and then over a keep-alive connection, idle in
// between, held every connection slot for as long as they liked, so the
// admin (or a probe) waited in the backlog indefinitely. Under a full cap,
// the server closes the longest-idle keep-alive connection to take a new
// one: a new client is served within seconds.
func TestIdleProbeClientsDoNotLockOutAdmin(t *testing.T) {
	b := memory.New()
	defer b.Close()
	sched, err := schedule.New(b, schedule.WithInstance("x"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := admin.New(b, sched, admin.WithMaxConnections(4))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	defer func() { cancel(); <-served }()
	addr := ln.Addr().String()

	// Four hogs fill the cap: a probe each, then idle, again every 500 ms.
	hogCtx, stopHogs := context.WithCancel(context.Background())
	defer stopHogs()
	up := make(chan struct{}, 4)
	for range 4 {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer c.Close()
			r := bufio.NewReader(c)
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for first := true; ; first = false {
				if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")); err != nil {
					return
				}
				resp, err := http.ReadResponse(r, nil)
				if err != nil {
					return // evicted
				}
				resp.Body.Close()
				if first {
					up <- struct{}{}
				}
				select {
				case <-hogCtx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	for range 4 {
		select {
		case <-up:
		case <-time.After(30 * time.Second):
			t.Fatal("the idle clients did not connect")
		}
	}
	client := &http.Client{Timeout: 10 * time.Second}
	start := time.Now()
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("a new client, with 4 idle keep-alive clients holding the cap of 4: %v after %v", err, time.Since(start).Round(time.Millisecond))
	}
	resp.Body.Close()
	t.Logf("served after %v", time.Since(start).Round(time.Millisecond))
}
