package chaos

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echo starts a line echo server.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(l))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestDelayAndClose(t *testing.T) {
	p, err := New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func() time.Duration {
		start := time.Now()
		if _, err := c.Write([]byte("hi\n")); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if l, err := r.ReadString('\n'); err != nil || l != "hi\n" {
			t.Fatalf("echo: %q %v", l, err)
		}
		return time.Since(start)
	}
	roundTrip()
	p.SetDelay(300 * time.Millisecond)
	if d := roundTrip(); d < 300*time.Millisecond {
		t.Fatalf("reply after %v, want ≥ 300ms", d)
	}
	p.SetDelay(0)
	p.CloseConns()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("read after CloseConns succeeded")
	}
	p.SetRefuse(true)
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		c2.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := bufio.NewReader(c2).ReadString('\n'); err == nil {
			t.Fatal("refused connection answered")
		}
		c2.Close()
	}
}
