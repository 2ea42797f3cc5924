package admin

import (
	"fmt"
	"net"
	"net/http"
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
// clients wait in the kernel's listen backlog until one closes. n must not
// be negative; 0 is the default.
func WithMaxConnections(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("%w: WithMaxConnections(%d): negative", ErrConfigInvalid, n)
		}
		c.maxConns = n
		return nil
	}
}

// limitListener accepts at most n connections at a time: Accept waits for
// a slot before taking a connection from the kernel, so a flood of
// connections costs the process no descriptors beyond n. When every slot
// is taken for evictAfter, it closes the connection that has been idle
// (between keep-alive requests) the longest: clients that send a probe now
// and then and idle in between would otherwise hold every slot for as long
// as they like, and keep the admin out.
type limitListener struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	mu   sync.Mutex
	idle map[*limitConn]time.Time // keep-alive connections between requests, since
}

// evictAfter is how long Accept waits for a free slot before it closes the
// longest-idle connection; minIdle, how long a connection must have been
// idle to be closed (not one whose next request is arriving).
const (
	evictAfter = 100 * time.Millisecond
	minIdle    = 200 * time.Millisecond
)

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{}), idle: map[*limitConn]time.Time{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for waiting := true; waiting; {
		t := time.NewTimer(evictAfter)
		select {
		case l.slots <- struct{}{}:
			waiting = false
		case <-l.done:
			t.Stop()
			return nil, net.ErrClosed
		case <-t.C:
			l.evictIdle()
		}
		t.Stop()
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

// connState is the http.Server's ConnState hook: it tracks which
// connections are idle between requests.
func (l *limitListener) connState(c net.Conn, st http.ConnState) {
	lc, ok := c.(*limitConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if st == http.StateIdle {
		l.idle[lc] = time.Now()
	} else {
		delete(l.idle, lc)
	}
}

// evictIdle closes the connection idle the longest, if one has been idle
// for minIdle.
func (l *limitListener) evictIdle() {
	l.mu.Lock()
	var (
		oldest *limitConn
		since  time.Time
	)
	for c, at := range l.idle {
		if oldest == nil || at.Before(since) {
			oldest, since = c, at
		}
	}
	if oldest == nil || time.Since(since) < minIdle {
		l.mu.Unlock()
		return
	}
	delete(l.idle, oldest)
	l.mu.Unlock()
	_ = oldest.Close()
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
