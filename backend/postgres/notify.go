package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/backend"
)

// notifier delivers release events (NOTIFY on the backend's channel, the
// key as payload) to waiters in this process. One dedicated connection,
// taken out of the pool (hijacked) by the first Wait, LISTENs; when it
// breaks every waiter is woken, since events may have been lost, and the
// next Wait connects again.
type notifier struct {
	b *Backend

	mu      sync.Mutex
	conn    *pgx.Conn          // nil when not listening
	cancel  context.CancelFunc // stops the receive loop
	done    chan struct{}      // closed when the receive loop ends
	waiters map[string]map[*waiter]struct{}
	closed  bool

	// dialing is held by the one listen that connects; the others wait
	// for it with their own context (not on mu, which no context bounds).
	dialing chan struct{}
	// acquiring, if set, is called before listen asks the pool for a
	// connection (tests).
	acquiring func()
}

type waiter struct {
	ch   chan struct{}
	once sync.Once
	stop func() bool // stops the context hook
	tm   *time.Timer
}

func (w *waiter) fire() { w.once.Do(func() { close(w.ch) }) }

func newNotifier(b *Backend) *notifier {
	return &notifier{b: b, waiters: map[string]map[*waiter]struct{}{}, dialing: make(chan struct{}, 1)}
}

// listen makes sure the LISTEN connection is up. It returns once LISTEN has
// been acknowledged by the server, so every NOTIFY committed afterwards
// reaches the receive loop.
func (n *notifier) listen(ctx context.Context) error {
	if done, err := n.listening(); done {
		return err
	}
	select {
	case n.dialing <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("listen: wait for the connect in flight: %w", stepErr(ctx, ctx.Err()))
	}
	defer func() { <-n.dialing }()
	if done, err := n.listening(); done { // the connect we waited for may have done it
		return err
	}
	if n.acquiring != nil {
		n.acquiring()
	}
	pc, err := n.b.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("listen: acquire a connection: %w", stepErr(ctx, err))
	}
	conn := pc.Hijack()
	if _, err := conn.Exec(ctx, "LISTEN "+n.b.channel); err != nil {
		conn.Close(context.Background())
		return fmt.Errorf("listen: %w", stepErr(ctx, err))
	}
	n.mu.Lock()
	if n.closed { // closed while connecting
		n.mu.Unlock()
		conn.Close(context.Background())
		return backend.ErrClosed
	}
	lctx, cancel := context.WithCancel(context.Background())
	n.conn, n.cancel, n.done = conn, cancel, make(chan struct{})
	go n.loop(lctx, conn, n.done)
	n.mu.Unlock()
	return nil
}

// listening reports whether listen has nothing to do: the notifier is
// closed (ErrClosed) or its connection is up (nil).
func (n *notifier) listening() (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.closed:
		return true, backend.ErrClosed
	case n.conn != nil:
		return true, nil
	}
	return false, nil
}

// loop receives notifications until the connection fails or close cancels
// it, then wakes every waiter.
func (n *notifier) loop(ctx context.Context, conn *pgx.Conn, done chan struct{}) {
	defer close(done)
	for {
		msg, err := conn.WaitForNotification(ctx)
		if err != nil {
			break
		}
		n.mu.Lock()
		for w := range n.waiters[msg.Payload] {
			n.dropLocked(msg.Payload, w)
		}
		n.mu.Unlock()
	}
	conn.Close(context.Background())
	n.mu.Lock()
	if n.conn == conn {
		n.conn = nil
	}
	for key, ws := range n.waiters {
		for w := range ws {
			n.dropLocked(key, w)
		}
	}
	n.mu.Unlock()
}

// dropLocked fires w and forgets it.
func (n *notifier) dropLocked(key string, w *waiter) {
	w.fire()
	if w.stop != nil {
		w.stop()
	}
	if w.tm != nil {
		w.tm.Stop()
	}
	ws := n.waiters[key]
	delete(ws, w)
	if len(ws) == 0 {
		delete(n.waiters, key)
	}
}

func (n *notifier) drop(key string, w *waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropLocked(key, w)
}

func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	cancel, done := n.cancel, n.done
	n.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// Wait implements backend.Notifier. The returned channel is closed when key
// is next released (a NOTIFY), when its current lease expires by the
// server's clock (a timer set from the remaining time the server reports),
// when the listening connection breaks, or when ctx ends. The holder is
// read, and the waiter registered in the lease row, after LISTEN is active,
// so a release just before Wait is seen: the channel is then closed at
// once.
func (b *Backend) Wait(ctx context.Context, key string) (<-chan struct{}, error) {
	return b.g.Wait(ctx, key, b.wait)
}

func (b *Backend) wait(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := b.gate.Enter(); err != nil {
		return nil, err
	}
	defer b.gate.Leave()
	n := b.n
	if err := n.listen(ctx); err != nil {
		return nil, err
	}
	w := &waiter{ch: make(chan struct{})}
	n.mu.Lock()
	if n.conn == nil { // the connection broke already: report a spurious wake-up
		n.mu.Unlock()
		w.fire()
		return w.ch, nil
	}
	if n.waiters[key] == nil {
		n.waiters[key] = map[*waiter]struct{}{}
	}
	n.waiters[key][w] = struct{}{}
	w.stop = context.AfterFunc(ctx, func() { n.drop(key, w) })
	n.mu.Unlock()

	// Registered and listening: now register in the lease row and read the
	// holder, in one statement.
	l, err := b.registerWaiter(ctx, key)
	switch {
	case errors.Is(err, backend.ErrNotFound):
		n.drop(key, w) // free already
		return w.ch, nil
	case err != nil:
		n.drop(key, w)
		return nil, err
	}
	n.mu.Lock()
	if _, ok := n.waiters[key][w]; ok {
		// A millisecond of slack: the lease is expired by the server's
		// clock once the timer fires, not a moment before.
		w.tm = time.AfterFunc(l.Remaining+time.Millisecond, func() { n.drop(key, w) })
	}
	n.mu.Unlock()
	return w.ch, nil
}

// registerSQL marks the held lease row as waited for until its current
// expiry plus a slack (1 s and a tenth of the remaining time, more than the
// waiter's local timer can drift from the server's clock over that time),
// and returns the holder. No row: the key is free (or its first grant is
// newer than the statement's snapshot; the waiter then wakes at once and
// tries again).
func (b *Backend) registerSQL() string {
	return `UPDATE ` + b.tLeases + ` SET wake_until = GREATEST(wake_until,
			expires_at + interval '1 second' + (expires_at - clock_timestamp()) / 10)
		WHERE key = $1 AND expires_at > clock_timestamp()
		RETURNING ` + b.leases.Cols
}

// registerWaiter runs registerSQL: the bare backend.ErrNotFound when the
// key is free.
func (b *Backend) registerWaiter(ctx context.Context, key string) (backend.Lease, error) {
	l, err := b.leases.D.ScanLease(b.pool.QueryRow(ctx, b.registerSQL(), key))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return backend.Lease{}, backend.ErrNotFound
	case err != nil:
		return backend.Lease{}, fmt.Errorf("register a waiter: %w", stepErr(ctx, err))
	}
	return l, nil
}
