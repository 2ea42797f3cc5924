package chaos

import (
	"bytes"
	"sync"
	"time"
)

// Request is a request as a rule sees it.
type Request struct {
	// Conn numbers the connection on its proxy, from 1.
	Conn int
	// Index numbers the request among every request the rule set has
	// seen (all connections of all its proxies), from 1.
	Index int
	// Bytes is the request as its framer cut it: one message, or one
	// chunk as read for Raw. Valid only during the call.
	Bytes []byte
}

// Match is a predicate on a request; the first rule whose Match is true
// (and has uses left) decides the request's fate. It is called with the
// rule set locked: it must not block or call the rule set.
type Match func(Request) bool

// Contains matches a request whose bytes contain any of subs.
func Contains(subs ...[]byte) Match {
	return func(r Request) bool {
		for _, s := range subs {
			if bytes.Contains(r.Bytes, s) {
				return true
			}
		}
		return false
	}
}

// Nth matches the rule set's n-th request (Request.Index == n).
func Nth(n int) Match { return func(r Request) bool { return r.Index == n } }

// Action is what a rule does to the requests it matches: Delay, DropReply,
// CutMidRequest, BlackHole or a *Hold.
type Action interface{ isAction() }

type delayAction struct{ d time.Duration }
type dropReplyAction struct{}
type cutAction struct{}
type blackHoleAction struct{}

func (delayAction) isAction()     {}
func (dropReplyAction) isAction() {}
func (cutAction) isAction()       {}
func (blackHoleAction) isAction() {}

// Delay forwards the request d after it arrived. The connection's later
// requests wait behind it (a TCP stream keeps its order); other
// connections' requests do not.
func Delay(d time.Duration) Action { return delayAction{d} }

// DropReply forwards the request, so the server applies it, and discards
// its reply: the reply's bytes and everything after them on the
// connection, which the proxy closes once the reply is complete — a
// connection cannot lose one reply and deliver the next. Where the framer
// keys replies (RESP, PostgreSQL, ZooKeeper, HTTP/2) the replies to
// earlier requests are delivered first; where it frames replies without
// keys (MySQL) the reply is taken to start with the next server message
// and the connection closes at it; with Raw every later server byte is
// dropped and the connection stays open (the client's own timeout ends
// it).
func DropReply() Action { return dropReplyAction{} }

// CutMidRequest forwards the first half of the request's bytes (at least
// one byte when it has two or more) and then closes both sides of the
// connection: the server sees a request cut short by the peer's end.
func CutMidRequest() Action { return cutAction{} }

// BlackHole discards the request and every later byte of its connection
// in both directions; the connection stays open, so the client sees
// silence, as from a node that vanished from the network. (SetDrop does
// the same to every connection of a proxy.)
func BlackHole() Action { return blackHoleAction{} }

// Hold is an Action that keeps the requests it matches until Release and
// then forwards them. A held request blocks the requests after it on its
// own connection (a TCP stream keeps its order); requests on other
// connections pass, so a client's retry on another connection reaches
// the server first and the held request arrives late. A held request is
// delivered even when its client closed the connection meanwhile (the
// proxy only half-closes the server's side after it), as a request in
// flight reaches a server after the client gave up. Requests the rule
// matches after Release pass at once.
type Hold struct {
	held     chan struct{} // closed when a first request is held
	released chan struct{} // closed by Release
	answered chan struct{} // closed when every held request is answered

	mu          sync.Mutex
	n           int // requests held
	outstanding int // held requests not yet answered
	heldOnce    sync.Once
	releaseOnce sync.Once
	answerOnce  sync.Once
}

func (*Hold) isAction() {}

// NewHold returns a Hold to pass to Rules.Add.
func NewHold() *Hold {
	return &Hold{held: make(chan struct{}), released: make(chan struct{}), answered: make(chan struct{})}
}

// Held is closed once a request is being held.
func (h *Hold) Held() <-chan struct{} { return h.held }

// Count is the number of requests held so far.
func (h *Hold) Count() int { h.mu.Lock(); defer h.mu.Unlock(); return h.n }

// Release forwards the held requests (each on its own connection, in
// order) and lets later matches pass.
func (h *Hold) Release() {
	h.mu.Lock()
	h.releaseOnce.Do(func() { close(h.released) })
	h.mu.Unlock()
	h.settle()
}

// Answered is closed after Release once every held request was forwarded
// and answered: its reply is complete (keyed framers), or the server sent
// anything after it (unkeyed), or its connection ended first.
func (h *Hold) Answered() <-chan struct{} { return h.answered }

// take registers a request to hold; false when the hold was released.
func (h *Hold) take() bool {
	h.mu.Lock()
	select {
	case <-h.released: // checked under mu: Release cannot settle in between
		h.mu.Unlock()
		return false
	default:
	}
	h.n++
	h.outstanding++
	h.mu.Unlock()
	h.heldOnce.Do(func() { close(h.held) })
	return true
}

// answer records that one held request was answered (or lost).
func (h *Hold) answer() {
	h.mu.Lock()
	h.outstanding--
	h.mu.Unlock()
	h.settle()
}

func (h *Hold) settle() {
	select {
	case <-h.released:
	default:
		return
	}
	h.mu.Lock()
	done := h.outstanding == 0
	h.mu.Unlock()
	if done {
		h.answerOnce.Do(func() { close(h.answered) })
	}
}

// Rules is an ordered set of fault rules, consulted for every request a
// proxy frames. One set may serve several proxies (WithRules), so that a
// rule counts and matches requests across the nodes of a cluster.
type Rules struct {
	mu    sync.Mutex
	index int
	rules []*Rule
}

// NewRules returns an empty rule set.
func NewRules() *Rules { return &Rules{} }

// Rule is one entry of a rule set.
type Rule struct {
	match  Match
	action Action
	times  int
	count  int
	fired  chan struct{}
}

// Add appends a rule that applies action to the first times requests
// matched (times ≤ 0: to every match) and returns it. A nil m matches
// every request; a nil action lets the request pass (the rule then only
// counts it and signals Fired).
func (rs *Rules) Add(m Match, a Action, times int) *Rule {
	r := &Rule{match: m, action: a, times: times, fired: make(chan struct{})}
	rs.mu.Lock()
	rs.rules = append(rs.rules, r)
	rs.mu.Unlock()
	return r
}

// Remove deletes r from the set; requests already affected stay so.
func (rs *Rules) Remove(r *Rule) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for i, x := range rs.rules {
		if x == r {
			rs.rules = append(rs.rules[:i], rs.rules[i+1:]...)
			return
		}
	}
}

// Fired is closed when the rule first applies.
func (r *Rule) Fired() <-chan struct{} { return r.fired }

// decide numbers a request and returns the action of the first rule it
// matches, or nil.
func (rs *Rules) decide(conn int, b []byte) Action {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.index++
	req := Request{Conn: conn, Index: rs.index, Bytes: b}
	for _, r := range rs.rules {
		if r.times > 0 && r.count >= r.times {
			continue
		}
		if r.match == nil || r.match(req) {
			r.count++
			if r.count == 1 {
				close(r.fired)
			}
			return r.action
		}
	}
	return nil
}
