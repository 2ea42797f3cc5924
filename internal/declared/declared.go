// Package declared keeps a backend's latest declaration
// (backend.Capabilities) when it is read again from the server's live
// configuration, possibly by several callers at once: of two readings, the
// one begun later (ReadAt) is kept, whichever finishes first.
package declared

import (
	"sync/atomic"

	"github.com/leasehold/leasehold/backend"
)

// Latest is the latest declaration. The zero value holds none: Load
// returns the zero Capabilities until the first Offer.
type Latest struct {
	p atomic.Pointer[backend.Capabilities]
}

// Load returns the latest declaration.
func (l *Latest) Load() backend.Capabilities {
	if c := l.p.Load(); c != nil {
		return *c
	}
	return backend.Capabilities{}
}

// Offer keeps c unless a declaration read later (by ReadAt) is kept
// already, and returns the one kept.
func (l *Latest) Offer(c backend.Capabilities) backend.Capabilities {
	for {
		old := l.p.Load()
		if old != nil && old.ReadAt.After(c.ReadAt) {
			return *old
		}
		if l.p.CompareAndSwap(old, &c) {
			return c
		}
	}
}
