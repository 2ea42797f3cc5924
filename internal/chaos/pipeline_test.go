package chaos_test

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestDropReplyKeepsEarlierReplies: three pipelined commands to a real
// redis-server, the middle one's reply dropped: the first reply arrives
// whole, then the connection ends; the middle command was applied.
func TestDropReplyKeepsEarlierReplies(t *testing.T) {
	srv := testserver.Redis(t)
	p, err := chaos.New(srv.Addr(), chaos.WithFramer(chaos.RESP))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Rules().Add(chaos.Command("INCR"), chaos.DropReply(), 1)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("*2\r\n$4\r\nECHO\r\n$5\r\nfirst\r\n*2\r\n$4\r\nINCR\r\n$7\r\ncounter\r\n*2\r\n$4\r\nECHO\r\n$4\r\nlast\r\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(bufio.NewReader(c))
	if err != nil {
		t.Fatalf("read until the proxy closed: %v (got %q)", err, got)
	}
	if string(got) != "$5\r\nfirst\r\n" {
		t.Fatalf("client got %q, want the first reply only", got)
	}
	d, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.Write([]byte("*2\r\n$3\r\nGET\r\n$7\r\ncounter\r\n"))
	d.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(d).ReadString('\n')
	if err != nil || line != "$1\r\n" {
		t.Fatalf("GET counter: %q %v, want the INCR applied", line, err)
	}
	if err := p.FramingError(); err != nil {
		t.Fatal(err)
	}
}
