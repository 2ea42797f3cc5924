package chaos

import (
	"bufio"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
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

// TestNthBlackHole: the second request of the rule set (Raw: one chunk
// per write, answered before the next is sent) goes into a black hole,
// and so does the rest of its connection; another connection still works.
func TestNthBlackHole(t *testing.T) {
	p, err := New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r := p.Rules().Add(Nth(2), BlackHole(), 1)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rd := bufio.NewReader(c)
	c.Write([]byte("one\n"))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if l, err := rd.ReadString('\n'); err != nil || l != "one\n" {
		t.Fatalf("first request: %q %v", l, err)
	}
	c.Write([]byte("two\n"))
	<-r.Fired()
	c.Write([]byte("three\n"))
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if l, err := rd.ReadString('\n'); err == nil {
		t.Fatalf("a black-holed connection answered %q", l)
	}
	d, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.Write([]byte("four\n"))
	d.SetReadDeadline(time.Now().Add(10 * time.Second))
	if l, err := bufio.NewReader(d).ReadString('\n'); err != nil || l != "four\n" {
		t.Fatalf("another connection: %q %v", l, err)
	}
}

// TestNewRejectsNilOptions: a nil option, framer or rule set is
// ErrInvalid naming it, and no proxy starts.
func TestNewRejectsNilOptions(t *testing.T) {
	for name, opt := range map[string]Option{"option 0": nil, "newFramer": WithFramer(nil), "rule set": WithRules(nil)} {
		p, err := New("127.0.0.1:1", opt)
		if !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), name) || p != nil {
			t.Errorf("%s: New = %v, %v; want ErrInvalid naming %q", name, p, err, name)
		}
	}
}
