package redis

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
)

// notifier delivers release (and, when enabled, expiry) events to waiters.
// One pattern subscription per Backend carries every key's channel; it is
// opened by the first Wait and re-established by go-redis after a
// connection loss. Every waiter is woken when the connection breaks, since
// events may have been lost.
type notifier struct {
	b *Backend

	mu      sync.Mutex
	ps      *goredis.PubSub
	ready   chan struct{} // closed while the subscription is confirmed
	waiters map[string]map[*waiter]struct{}
	closed  bool
	done    chan struct{} // closed when the receive loop ends
	// denied is closed, with deniedErr set, when the server refused the
	// pattern subscription (an ACL without the literal channel pattern,
	// docs/namespaces.md): Wait then fails at once and callers poll.
	denied    chan struct{}
	deniedErr error
}

type waiter struct {
	ch   chan struct{}
	once sync.Once
	stop func() bool // stops the context hook
	tm   *time.Timer
}

func (w *waiter) fire() { w.once.Do(func() { close(w.ch) }) }

func newNotifier(b *Backend) *notifier {
	return &notifier{b: b, ready: make(chan struct{}), denied: make(chan struct{}), waiters: map[string]map[*waiter]struct{}{}}
}

func (n *notifier) pattern() string { return globEscape(n.b.prefix) + "released:{*" }

func (n *notifier) expiredChannel() string {
	return fmt.Sprintf("__keyevent@%d__:expired", n.b.db)
}

// start opens the subscription once.
func (n *notifier) start(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return backend.ErrClosed
	}
	if n.ps != nil {
		return nil
	}
	ps := n.b.c.PSubscribe(ctx, n.pattern())
	if n.b.expEvt.Load() {
		if err := ps.Subscribe(ctx, n.expiredChannel()); err != nil {
			ps.Close()
			return fmt.Errorf("subscribe %s: %w", n.expiredChannel(), err)
		}
	}
	n.ps, n.done = ps, make(chan struct{})
	go n.loop(ps)
	return nil
}

// loop reads the subscription until it is closed.
func (n *notifier) loop(ps *goredis.PubSub) {
	defer close(n.done)
	ctx := context.Background()
	for {
		msg, err := ps.Receive(ctx)
		if err != nil && n.b.expEvt.Load() && strings.HasPrefix(err.Error(), "NOPERM") {
			// The user's ACL does not allow the server-wide expired-key
			// channel (it names every namespace's keys; docs/namespaces.md).
			// The pattern subscription before it stands: go on without
			// expiry events, as on a server that does not send them.
			n.b.expEvt.Store(false)
			_ = ps.Unsubscribe(ctx, n.expiredChannel())
			continue
		}
		if err != nil && strings.HasPrefix(err.Error(), "NOPERM") {
			n.mu.Lock()
			if n.deniedErr == nil {
				n.deniedErr = fmt.Errorf("psubscribe %s: %w", n.pattern(), err)
				close(n.denied)
			}
			n.wakeAllLocked()
			n.mu.Unlock()
		}
		if err != nil {
			n.mu.Lock()
			closed := n.closed
			select {
			case <-n.ready: // events may have been lost: not ready until resubscribed
				n.ready = make(chan struct{})
			default:
			}
			n.wakeAllLocked()
			n.mu.Unlock()
			if closed {
				return
			}
			time.Sleep(50 * time.Millisecond) // go-redis reconnects on the next Receive
			continue
		}
		switch m := msg.(type) {
		case *goredis.Subscription:
			if m.Kind == "psubscribe" && m.Channel == n.pattern() {
				n.mu.Lock()
				select {
				case <-n.ready:
				default:
					close(n.ready)
				}
				n.mu.Unlock()
			}
		case *goredis.Message:
			var key string
			if m.Channel == n.expiredChannel() {
				lk := m.Payload
				pre := n.b.prefix + "lease:{"
				if !strings.HasPrefix(lk, pre) || !strings.HasSuffix(lk, "}") {
					continue
				}
				key = lk[len(pre) : len(lk)-1]
			} else {
				key = n.b.keyOfChannel(m.Channel)
			}
			n.mu.Lock()
			n.wakeLocked(key)
			n.mu.Unlock()
		}
	}
}

func (n *notifier) wakeLocked(key string) {
	for w := range n.waiters[key] {
		w.fire()
	}
	delete(n.waiters, key)
}

func (n *notifier) wakeAllLocked() {
	for k := range n.waiters {
		n.wakeLocked(k)
	}
}

func (n *notifier) remove(key string, w *waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ws := n.waiters[key]; ws != nil {
		delete(ws, w)
		if len(ws) == 0 {
			delete(n.waiters, key)
		}
	}
}

func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	ps, done := n.ps, n.done
	n.wakeAllLocked()
	n.mu.Unlock()
	if ps != nil {
		ps.Close()
		<-done
	}
}

// Wait implements backend.Notifier. The channel closes when key is
// released (pushed by the release script), when the current holder's TTL
// runs out (a timer at the remaining TTL the server reports, and the
// server's expired-key event when enabled), when the subscription's
// connection breaks, or when ctx ends. A key that is free closes it at once.
func (b *Backend) Wait(ctx context.Context, key string) (<-chan struct{}, error) {
	return b.g.Wait(ctx, key, b.waitFor)
}

func (b *Backend) waitFor(ctx context.Context, key string) (<-chan struct{}, error) {
	n := b.ps
	if err := n.start(ctx); err != nil {
		return nil, err
	}
	n.mu.Lock()
	ready := n.ready
	n.mu.Unlock()
	select { // the subscription must be live before the key is checked
	case <-ready:
	case <-n.denied:
		return nil, n.deniedErr
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	w := &waiter{ch: make(chan struct{})}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, backend.ErrClosed
	}
	if n.waiters[key] == nil {
		n.waiters[key] = map[*waiter]struct{}{}
	}
	n.waiters[key][w] = struct{}{}
	n.mu.Unlock()

	pttl, err := b.c.PTTL(ctx, b.leaseKey(key)).Result()
	if err != nil {
		n.remove(key, w)
		return nil, err
	}
	if pttl <= 0 { // free (or about to be): let the caller try now
		n.remove(key, w)
		w.fire()
		return w.ch, nil
	}
	// A release publishes; an expiry does not (unless keyspace events are
	// on, and then late): wake at the remaining TTL.
	w.tm = time.AfterFunc(pttl+time.Millisecond, func() { n.remove(key, w); w.fire() })
	w.stop = context.AfterFunc(ctx, func() { n.remove(key, w); w.fire() })
	go func() { // release the timer and context hook once fired
		<-w.ch
		w.tm.Stop()
		w.stop()
	}()
	return w.ch, nil
}
