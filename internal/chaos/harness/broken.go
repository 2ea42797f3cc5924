package harness

import (
	"context"
	"sync"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// broken is the negative control: a deliberately wrong backend around a
// correct one. Renew and Release ignore the caller's owner and token (they
// act on whoever holds the key), and the lease token counter restarts from
// zero after each release, as seen by this process. The checker must flag
// a run over it.
type broken struct {
	backend.Backend
	mu     sync.Mutex
	offset map[string]uint64
}

func newBroken(b backend.Backend) *broken { return &broken{Backend: b, offset: map[string]uint64{}} }

func (b *broken) sub(key string, g backend.Grant) backend.Grant {
	b.mu.Lock()
	defer b.mu.Unlock()
	if g.Token > b.offset[key] {
		g.Token -= b.offset[key]
	}
	return g
}

func (b *broken) Acquire(ctx context.Context, key string, o backend.Owner, ttl time.Duration) (backend.Grant, error) {
	g, err := b.Backend.Acquire(ctx, key, o, ttl)
	return b.sub(key, g), err
}

func (b *broken) holder(ctx context.Context, key string) (backend.Owner, uint64, bool) {
	l, err := b.Backend.Get(ctx, key)
	return l.Owner, l.Token, err == nil
}

func (b *broken) Renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	if ho, ht, ok := b.holder(ctx, req.Key); ok {
		req.Owner, req.Token = ho, ht // owner check off
	}
	g, err := b.Backend.Renew(ctx, req)
	return b.sub(req.Key, g), err
}

func (b *broken) Release(ctx context.Context, key string, o backend.Owner, token uint64) error {
	ho, ht, ok := b.holder(ctx, key)
	if !ok {
		return b.Backend.Release(ctx, key, o, token)
	}
	b.mu.Lock()
	b.offset[key] = ht // counter "reset"
	b.mu.Unlock()
	return b.Backend.Release(ctx, key, ho, ht)
}
