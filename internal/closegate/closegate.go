// Package closegate is the closed state of a backend, written once: calls
// are admitted (Enter/Leave) or checked (Check) until Shut, then answered
// backend.ErrClosed before anything is sent.
package closegate

import (
	"sync"
	"sync/atomic"

	"github.com/leasehold/leasehold/backend"
)

// Gate admits calls until it is shut. The zero Gate is open.
type Gate struct {
	mu     sync.RWMutex // read side held by admitted calls; Shut takes the write side
	closed atomic.Bool
}

// Enter admits a call: nil while the gate is open, and the caller must
// call Leave when done (Shut waits for it); backend.ErrClosed once it is
// shut, and the caller must not call Leave.
func (g *Gate) Enter() error {
	g.mu.RLock()
	if g.closed.Load() {
		g.mu.RUnlock()
		return backend.ErrClosed
	}
	return nil
}

// Leave ends a call admitted by Enter.
func (g *Gate) Leave() { g.mu.RUnlock() }

// Check returns backend.ErrClosed once the gate is shut, nil before,
// without admitting the call (Shut does not wait for it). It never blocks.
func (g *Gate) Check() error {
	if g.closed.Load() {
		return backend.ErrClosed
	}
	return nil
}

// Shut closes the gate once every call admitted by Enter has left, and
// reports whether this call shut it (false: it was shut before). Calls
// that Enter meanwhile wait, then get backend.ErrClosed.
func (g *Gate) Shut() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.closed.Swap(true)
}
