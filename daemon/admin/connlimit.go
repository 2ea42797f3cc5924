package admin

import (
	"net"
	"sync"
	"time"
)

// Timeouts of the admin HTTP server: a client that sends its request
// slowly, reads the answer slowly or keeps an idle keep-alive connection is
// cut off, so that it cannot hold one of the limited connections forever.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 30 * time.Second
	maxHeaderBytes    = 64 << 10
)

// defaultMaxConns is the connection cap when WithMaxConnections is not
// given: a quarter of the process's open-file limit, between 4 and 512, so
// that the listener can never take the descriptors the daemon's jobs and
// backend need.
func defaultMaxConns() int {
	return min(max(openFileLimit()/4, 4), 512)
}

// WithMaxConnections caps the connections the server holds open at once
// (default: a quarter of the open-file limit, at most 512). Further
// clients wait in the kernel's listen backlog until one closes.
func WithMaxConnections(n int) Option { return func(c *config) { c.maxConns = n } }

// limitListener accepts at most n connections at a time: Accept waits for
// a slot before taking a connection from the kernel, so a flood of
// connections costs the process no descriptors beyond n.
type limitListener struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func newLimitListener(ln net.Listener, n int) net.Listener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

// Close closes the listener; an Accept waiting for a slot returns at once.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
