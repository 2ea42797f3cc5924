// Package chaos injects network faults between a client and a server for
// tests: a TCP proxy on a loopback port.
//
// Faults on the whole proxy can be switched at run time — delay the
// server's replies (SetDelay), drop traffic (SetDrop: a black hole, bytes
// are read and discarded, connections stay open), refuse new connections
// (SetRefuse), and close every open connection (CloseConns). SetDelay acts
// on the server→client direction only, so a request reaches the server
// (and is applied) at once while its reply is withheld: the case a lease
// holder must survive by counting its deadline from the time it sent a
// renewal, not from the reply's arrival.
//
// Faults on single requests come from rules (Rules.Add): given a Framer
// for the protocol (WithFramer: RESP, Postgres, MySQL, ZooKeeper, HTTP2, or
// Raw for any other), the proxy cuts each connection's bytes into requests
// and replies, and the first rule whose Match accepts a request applies
// its Action: Delay it, Hold it until Release (later requests on other
// connections pass it), forward it and DropReply, CutMidRequest, or
// BlackHole the connection. See each Framer for what its protocol lets
// the proxy tell apart.
package chaos

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// Proxy forwards TCP connections from its own loopback address to a target.
type Proxy struct {
	target    string
	ln        net.Listener
	newFramer func() Framer
	rules     *Rules

	mu         sync.Mutex
	delay      time.Duration
	drop       bool
	refuse     bool
	conns      map[*link]struct{}
	nconns     int
	closed     bool
	framingErr error
	wg         sync.WaitGroup
}

// Option configures a Proxy (New).
type Option func(*Proxy) error

// WithFramer makes the proxy frame each connection with a Framer from
// newFramer (e.g. chaos.RESP), so that rules see requests. Without it a
// proxy frames as Raw.
func WithFramer(newFramer func() Framer) Option {
	return func(p *Proxy) error {
		if newFramer == nil {
			return fmt.Errorf("%w: chaos.WithFramer: newFramer is nil", backend.ErrInvalid)
		}
		p.newFramer = newFramer
		return nil
	}
}

// WithRules makes the proxy consult rs (shared, e.g., by one proxy per
// node of a cluster) instead of a rule set of its own.
func WithRules(rs *Rules) Option {
	return func(p *Proxy) error {
		if rs == nil {
			return fmt.Errorf("%w: chaos.WithRules: rule set is nil", backend.ErrInvalid)
		}
		p.rules = rs
		return nil
	}
}

// New starts a proxy on 127.0.0.1 (a free port) forwarding to target.
func New(target string, opts ...Option) (*Proxy, error) {
	p := &Proxy{target: target, newFramer: Raw, rules: NewRules(), conns: map[*link]struct{}{}}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: chaos.New: option %d is nil", backend.ErrInvalid, i)
		}
		if err := o(p); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Rules is the rule set the proxy consults.
func (p *Proxy) Rules() *Rules { return p.rules }

// SetDelay delays every chunk of server→client bytes by d from the moment
// the proxy read it (order kept). Zero removes the delay for new bytes.
func (p *Proxy) SetDelay(d time.Duration) { p.mu.Lock(); p.delay = d; p.mu.Unlock() }

// SetDrop turns the black hole on or off: while on, bytes in both
// directions are read and discarded. A connection that lost bytes is
// forwarded unframed afterwards.
func (p *Proxy) SetDrop(on bool) { p.mu.Lock(); p.drop = on; p.mu.Unlock() }

// SetRefuse makes the proxy close new connections at once while on.
func (p *Proxy) SetRefuse(on bool) { p.mu.Lock(); p.refuse = on; p.mu.Unlock() }

// FramingError returns the first error a framer met on this proxy's
// connections (ErrFraming), nil if none: such a connection was forwarded
// unframed from there on, out of the rules' sight.
func (p *Proxy) FramingError() error { p.mu.Lock(); defer p.mu.Unlock(); return p.framingErr }

// CloseConns closes every open connection (clients see a reset or EOF).
func (p *Proxy) CloseConns() {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.close()
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

func (p *Proxy) framingFailed(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.framingErr == nil {
		p.framingErr = err
	}
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
		fr := p.newFramer()
		_, raw := fr.(rawFramer)
		l := &link{p: p, client: c, server: s, fr: fr, rawReplies: raw, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			continue
		}
		p.nconns++
		l.id = p.nconns
		p.conns[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); l.replies() }()
		go func() { defer p.wg.Done(); l.requests() }()
	}
}
