package chaos

import (
	"net"
	"sync"
	"time"
)

// link is one proxied connection: the client's and the server's sides.
type link struct {
	p              *Proxy
	id             int
	client, server net.Conn
	fr             Framer
	rawReplies     bool // the framer does not frame replies (Raw)

	done      chan struct{} // closed by close
	closeOnce sync.Once

	mu        sync.Mutex
	silenced  bool     // BlackHole: discard every later byte both ways
	dropArmed bool     // DropReply: a reply is to be dropped
	dropKeyed bool     // ... the one keyed dropKey (else the next)
	dropKey   int64    //
	dropping  bool     // the dropped reply has begun: drop all from here
	waiters   []waiter // held requests waiting for their replies
}

// waiter is a forwarded held request whose reply a Hold waits for.
type waiter struct {
	keyed bool
	key   int64
	fn    func()
}

// close closes both sides once and releases the link's waiters.
func (l *link) close() {
	l.closeOnce.Do(func() {
		close(l.done)
		l.client.Close()
		l.server.Close()
		l.p.mu.Lock()
		delete(l.p.conns, l)
		l.p.mu.Unlock()
		l.mu.Lock()
		ws := l.waiters
		l.waiters = nil
		l.mu.Unlock()
		for _, w := range ws {
			w.fn()
		}
	})
}

// requests copies client→server, framing requests and applying rules.
// On the client's end of stream it half-closes the server's side, so that
// the server still reads (and applies) what was forwarded and answers it.
func (l *link) requests() {
	defer func() {
		if tc, ok := l.server.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		} else {
			l.close()
		}
	}()
	framed := true
	var pending []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := l.client.Read(buf)
		if n > 0 {
			if _, drop := l.p.faults(); drop || l.isSilenced() {
				framed, pending = false, nil // bytes lost: the stream no longer frames
			} else {
				pending = append(pending, buf[:n]...)
				for len(pending) > 0 {
					fr := Frame{Len: len(pending)}
					if framed {
						var ferr error
						if fr, ferr = l.fr.Request(pending); ferr != nil {
							l.p.framingFailed(ferr)
							framed, fr = false, Frame{Len: len(pending)}
						}
					}
					if fr.Len == 0 {
						break
					}
					if !l.forward(pending[:fr.Len], fr, framed) {
						return
					}
					pending = pending[fr.Len:]
				}
				pending = append([]byte(nil), pending...)
			}
		}
		if err != nil {
			return
		}
	}
}

// forward applies the rules to one request and sends it on; false when
// the link is done.
func (l *link) forward(req []byte, fr Frame, framed bool) bool {
	var act Action
	if framed {
		act = l.p.rules.decide(l.id, req)
	}
	switch a := act.(type) {
	case delayAction:
		t := time.NewTimer(a.d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-l.done:
			return false
		}
	case *Hold:
		if a.take() {
			select {
			case <-a.released:
			case <-l.done:
				a.answer()
				return false
			}
			l.mu.Lock()
			l.waiters = append(l.waiters, waiter{keyed: fr.Keyed && !l.rawReplies, key: fr.Key, fn: sync.OnceFunc(a.answer)})
			l.mu.Unlock()
		}
	case dropReplyAction:
		l.mu.Lock()
		l.dropArmed, l.dropKeyed, l.dropKey = true, fr.Keyed && !l.rawReplies, fr.Key
		l.mu.Unlock()
	case cutAction:
		_, _ = l.server.Write(req[:len(req)/2])
		l.close()
		return false
	case blackHoleAction:
		l.mu.Lock()
		l.silenced = true
		l.mu.Unlock()
		return true
	}
	if _, err := l.server.Write(req); err != nil {
		l.close()
		return false
	}
	if fr.Keyed && fr.Last {
		l.ended(fr.Key)
	}
	return true
}

// ended answers the waiters for key's exchange, which the client ended:
// no reply will come for it.
func (l *link) ended(key int64) {
	l.mu.Lock()
	var answered []func()
	rest := l.waiters[:0]
	for _, w := range l.waiters {
		if w.keyed && w.key == key {
			answered = append(answered, w.fn)
			continue
		}
		rest = append(rest, w)
	}
	l.waiters = rest
	l.mu.Unlock()
	for _, fn := range answered {
		fn()
	}
}

func (l *link) isSilenced() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.silenced }

type chunk struct {
	b  []byte
	at time.Time // when to deliver
}

// replies copies server→client. A reader frames the server's bytes and
// decides what to drop; the bytes to deliver go through a queue so that
// a delay holds back each chunk from its read time without blocking the
// reader.
func (l *link) replies() {
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		framed := !l.rawReplies
		var pending []byte
		buf := make([]byte, 32<<10)
		for {
			n, err := l.server.Read(buf)
			if n > 0 {
				d, drop := l.p.faults()
				if drop {
					framed, pending = false, nil
				} else {
					pending = append(pending, buf[:n]...)
					var out []byte
					var stop bool
					for len(pending) > 0 && !stop {
						fr := Frame{Len: len(pending)}
						if framed {
							var ferr error
							if fr, ferr = l.fr.Reply(pending); ferr != nil {
								l.p.framingFailed(ferr)
								framed, fr = false, Frame{Len: len(pending)}
							}
						}
						if fr.Len == 0 {
							break
						}
						var keep bool
						keep, stop = l.sort(fr, framed)
						if keep {
							out = append(out, pending[:fr.Len]...)
						}
						pending = pending[fr.Len:]
					}
					pending = append([]byte(nil), pending...)
					if len(out) > 0 {
						q <- chunk{b: out, at: time.Now().Add(d)}
					}
					if stop { // the writer closes the link after what is queued
						return
					}
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer l.close()
	for c := range q {
		if w := time.Until(c.at); w > 0 {
			time.Sleep(w) // holding back this reply is the fault itself
		}
		if _, err := l.client.Write(c.b); err != nil {
			l.close()
			for range q { // drain so the reader can finish
			}
			return
		}
	}
}

// sort decides the fate of one reply message: keep (deliver it) and stop
// (close the link after it: a dropped reply is complete).
func (l *link) sort(fr Frame, framed bool) (keep, stop bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var answered []func()
	rest := l.waiters[:0]
	for _, w := range l.waiters {
		if !w.keyed || !framed || fr.Keyed && fr.Key == w.key && fr.Last {
			answered = append(answered, w.fn)
			continue
		}
		rest = append(rest, w)
	}
	l.waiters = rest
	defer func() {
		for _, fn := range answered {
			fn()
		}
	}()
	if l.silenced {
		return false, false
	}
	if l.dropArmed && !l.dropping && (!l.dropKeyed || !framed || fr.Keyed && fr.Key == l.dropKey) {
		l.dropping = true
	}
	if !l.dropping {
		return true, false
	}
	switch {
	case !framed || l.rawReplies: // nothing tells where the reply ends
		return false, false
	case !l.dropKeyed: // framed but unkeyed: the first message is the reply's start
		return false, true
	default:
		return false, fr.Keyed && fr.Key == l.dropKey && fr.Last
	}
}
