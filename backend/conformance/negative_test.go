package conformance_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/memory"
)

// broken is a deliberately wrong backend: Renew and Release do not check
// the owner or the token, and the token counter restarts after a release.
type broken struct {
	backend.Backend
	mu     sync.Mutex
	offset map[string]uint64 // subtracted from every token: "reset" on release
}

func (b *broken) Acquire(ctx context.Context, key string, o backend.Owner, ttl time.Duration) (backend.Grant, error) {
	g, err := b.Backend.Acquire(ctx, key, o, ttl)
	b.mu.Lock()
	defer b.mu.Unlock()
	g.Token -= b.offset[key]
	return g, err
}

// holder returns the real owner and token, ignoring the caller's.
func (b *broken) holder(ctx context.Context, key string) (backend.Owner, uint64, bool) {
	l, err := b.Backend.Get(ctx, key)
	return l.Owner, l.Token, err == nil
}

func (b *broken) Renew(ctx context.Context, key string, o backend.Owner, token uint64, ttl time.Duration) (backend.Grant, error) {
	if ho, ht, ok := b.holder(ctx, key); ok {
		o, token = ho, ht
	}
	g, err := b.Backend.Renew(ctx, key, o, token, ttl)
	b.mu.Lock()
	defer b.mu.Unlock()
	g.Token -= b.offset[key]
	return g, err
}

func (b *broken) Release(ctx context.Context, key string, o backend.Owner, token uint64) error {
	ho, ht, ok := b.holder(ctx, key)
	if !ok {
		return b.Backend.Release(ctx, key, o, token)
	}
	b.mu.Lock()
	b.offset[key] = ht
	b.mu.Unlock()
	return b.Backend.Release(ctx, key, ho, ht)
}

func TestNegativeControl(t *testing.T) {
	h := conformance.Harness{
		New:  func(testing.TB) backend.Backend { return memory.New() },
		Want: memory.New().Capabilities(),
	}
	wrap := func(b backend.Backend) backend.Backend { return &broken{Backend: b, offset: map[string]uint64{}} }
	conformance.NegativeControl(t, h, wrap,
		"TokensIncreaseOver1000Handovers",
		"TokensIncreaseAcrossReleasePruneExpiry",
		"StaleHolderCannotRenewOrRelease",
		"SameInstanceNameOtherNonce",
		"ExclusionUnder64Goroutines",
		"LockWatchdogKeepsLeaseAlive",
	)
}
