package zookeeper

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// handshakeDialer dials as go-zookeeper's default dialer does, and bounds
// the session handshake by limit (the requested session timeout).
//
// go-zookeeper waits for the answer to its connect request for ten times
// its receive timeout (20/3 of the session timeout: 200 s for a 30 s
// session). A server restarting can accept the connection and never
// answer it; the client then sat on that connection for minutes, every
// call of the backend queued behind it, while a fresh connection would
// have been served at once (seen in TestServerRestartWhileHeld on a loaded
// host, and by any client of a server restarted under it). A handshake
// unanswered for a whole session timeout cannot save the session, so the
// connection is dropped then and the client dials again.
func handshakeDialer(limit time.Duration) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &handshakeConn{Conn: c, limit: limit}, nil
	}
}

// handshakeConn caps the read and write deadlines set on it to limit from
// now until the handshake ends, which go-zookeeper marks by clearing the
// read deadline after reading the connect response's length; later
// deadlines pass unchanged.
type handshakeConn struct {
	net.Conn
	limit time.Duration
	done  atomic.Bool
}

func (c *handshakeConn) capped(t time.Time) time.Time {
	if c.done.Load() || t.IsZero() {
		return t
	}
	if m := time.Now().Add(c.limit); t.After(m) {
		return m
	}
	return t
}

func (c *handshakeConn) SetDeadline(t time.Time) error { return c.Conn.SetDeadline(c.capped(t)) }

func (c *handshakeConn) SetWriteDeadline(t time.Time) error {
	return c.Conn.SetWriteDeadline(c.capped(t))
}

func (c *handshakeConn) SetReadDeadline(t time.Time) error {
	if t.IsZero() {
		c.done.Store(true)
	}
	return c.Conn.SetReadDeadline(c.capped(t))
}
