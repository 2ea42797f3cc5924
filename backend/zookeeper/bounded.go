package zookeeper

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/backend"
)

// Calls bounded by their context. go-zookeeper's requests take no context:
// one whose request or reply is held up waits for the client's read
// timeout (two thirds of the session timeout), far past its caller's
// context. So Acquire, Renew and Release run their requests in a goroutine
// and return when ctx ends: the caller is told the outcome is unknown, and
// the goroutine goes on, so its late result is handled exactly as if the
// caller had waited (a grant is timed and tracked, an error marks the owner
// unsure and settles). Until it returns, the call is "abandoned": a later
// call by the same owner waits for it (or, if its own context ends first,
// fails not sent), so that the late result and the next call never
// interleave — a late Renew would otherwise re-arm a node's timer by an
// older send time than the next Renew's, and a late withdrawal delete a
// node that the retry of its Acquire was just granted.

// bounded runs op in a goroutine and waits for it or for ctx's end. It
// reports whether op returned (its results are then the caller's to read);
// false: ctx ended first, op goes on, registered as owner n's abandoned call
// until it returns (see waitAbandoned). A return that comes before ctx's
// end is seen — an answer beats "unknown".
func (b *Backend) bounded(ctx context.Context, n backend.Nonce, op func()) (returned bool) {
	fin := make(chan struct{})
	go func() {
		op()
		b.mu.Lock()
		defer b.mu.Unlock()
		// Under b.mu, with the removal: a caller that registers fin saw
		// it open, so this removes it.
		close(fin)
		s := b.abandoned[n]
		for i, c := range s {
			if c == fin {
				s = append(s[:i], s[i+1:]...)
				break
			}
		}
		if len(s) == 0 {
			delete(b.abandoned, n)
		} else {
			b.abandoned[n] = s
		}
	}()
	select {
	case <-fin:
		return true
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-fin:
		return true
	default:
	}
	b.abandoned[n] = append(b.abandoned[n], fin)
	return false
}

// waitAbandoned waits until no abandoned call of owner n is running. When
// ctx ends first nothing was sent: the error wraps ErrNotApplied.
func (b *Backend) waitAbandoned(ctx context.Context, n backend.Nonce) error {
	for {
		b.mu.Lock()
		var fin chan struct{}
		if s := b.abandoned[n]; len(s) > 0 {
			fin = s[0]
		}
		b.mu.Unlock()
		if fin == nil {
			return nil
		}
		select {
		case <-fin:
		case <-ctx.Done():
			return fmt.Errorf("not sent, an earlier call of this owner whose caller gave up is still waiting for its reply: %w", backend.NotSent(ctx))
		}
	}
}

// unknownOutcome is the error of a call whose context ended before its
// reply: the request may have been applied, or may still be.
func unknownOutcome(ctx context.Context) error {
	return fmt.Errorf("no reply before the context ended, the outcome is unknown (the request may still be applied): %w", backend.ContextEnded(ctx))
}
