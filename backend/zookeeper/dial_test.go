package zookeeper_test

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/zookeeper"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestSilentHandshakeIsDropped: a server that accepts a connection and
// never answers its connect request (as one restarting can) is left after
// the session timeout, and the next connection gets the session.
// go-zookeeper alone waits 20/3 of the session timeout (40 s for the 6 s
// here, beyond the 30 s OpenConfig allows); every call of the backend
// queued behind that connection.
func TestSilentHandshakeIsDropped(t *testing.T) {
	srv := testserver.ZooKeeper(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	wg.Add(1)
	go func() { // the first connection is held silent; later ones reach the server
		defer wg.Done()
		for first := true; ; first = false {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			if first {
				continue
			}
			s, err := net.Dial("tcp", srv.Addr())
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, s)
			mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
	b, err := zookeeper.OpenConfig(context.Background(), zookeeper.Config{Servers: []string{ln.Addr().String()}, Prefix: "/silent",
		SessionTimeout: 6 * time.Second, ConnectTimeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("OpenConfig behind a first connection that never answers: %v", err)
	}
	b.Close()
}
