// Package chaos injects network faults between a client and a server for
// tests: a TCP proxy on a loopback port whose faults can be switched at run
// time — delay the server's replies, drop traffic (a black hole: bytes are
// read and discarded, connections stay open), refuse new connections, and
// close every open connection.
//
// Delay is applied to the server→client direction only, so a request
// reaches the server (and is applied) at once while its reply is withheld:
// the case a lease holder must survive by counting its deadline from the
// time it sent a renewal, not from the reply's arrival.
package chaos

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections from its own loopback address to a target.
type Proxy struct {
	target string
	ln     net.Listener

	mu     sync.Mutex
	delay  time.Duration
	drop   bool
	refuse bool
	conns  map[*link]struct{}
	closed bool
	wg     sync.WaitGroup
}

type link struct{ client, server net.Conn }

func (l *link) close() { l.client.Close(); l.server.Close() }

// New starts a proxy on 127.0.0.1 (a free port) forwarding to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay delays every chunk of server→client bytes by d from the moment
// the proxy read it (order kept). Zero removes the delay for new bytes.
func (p *Proxy) SetDelay(d time.Duration) { p.mu.Lock(); p.delay = d; p.mu.Unlock() }

// SetDrop turns the black hole on or off: while on, bytes in both
// directions are read and discarded.
func (p *Proxy) SetDrop(on bool) { p.mu.Lock(); p.drop = on; p.mu.Unlock() }

// SetRefuse makes the proxy close new connections at once while on.
func (p *Proxy) SetRefuse(on bool) { p.mu.Lock(); p.refuse = on; p.mu.Unlock() }

// CloseConns closes every open connection (clients see a reset or EOF).
func (p *Proxy) CloseConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.conns {
		l.close()
		delete(p.conns, l)
	}
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.CloseConns()
	p.wg.Wait()
	return err
}

func (p *Proxy) faults() (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay, p.drop
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse, closed := p.refuse, p.closed
		p.mu.Unlock()
		if refuse || closed {
			c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		l := &link{client: c, server: s}
		p.mu.Lock()
		p.conns[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); p.pipe(s, c, false); l.close() }()
		go func() { defer p.wg.Done(); p.pipe(c, s, true); l.close() }()
	}
}

type chunk struct {
	b  []byte
	at time.Time // when to deliver
}

// pipe copies src to dst. Replies (server→client) go through a queue so
// that a delay holds back each chunk from its read time without blocking
// the reader.
func (p *Proxy) pipe(dst, src net.Conn, replies bool) {
	if !replies {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if _, drop := p.faults(); !drop {
					if _, werr := dst.Write(buf[:n]); werr != nil {
						return
					}
				}
			}
			if err != nil {
				return
			}
		}
	}
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				d, drop := p.faults()
				if !drop {
					q <- chunk{b: append([]byte(nil), buf[:n]...), at: time.Now().Add(d)}
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if w := time.Until(c.at); w > 0 {
			time.Sleep(w) // holding back this reply is the fault itself
		}
		if _, err := dst.Write(c.b); err != nil {
			src.Close()
			for range q { // drain so the reader can finish
			}
			return
		}
	}
}
