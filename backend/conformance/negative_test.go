package conformance_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
)

// broken is a deliberately wrong backend: Renew and Release do not check
// the owner or the token, and the token counter restarts after a release.
func broken(b backend.Backend) *faultbackend.Backend {
	var mu sync.Mutex
	offset := map[string]uint64{} // subtracted from every token: "reset" on release
	shift := func(key string, g backend.Grant, err error) (backend.Grant, error) {
		mu.Lock()
		defer mu.Unlock()
		g.Token -= offset[key]
		return g, err
	}
	// holder returns the real owner and token, ignoring the caller's.
	holder := func(ctx context.Context, key string) (backend.Owner, uint64, bool) {
		l, err := b.Get(ctx, key)
		return l.Owner, l.Token, err == nil
	}
	return &faultbackend.Backend{
		Next: b,
		OnAcquire: func(ctx context.Context, next faultbackend.AcquireFunc, key string, o backend.Owner, ttl time.Duration) (backend.Grant, error) {
			g, err := next(ctx, key, o, ttl)
			return shift(key, g, err)
		},
		OnRenew: func(ctx context.Context, next faultbackend.RenewFunc, req backend.RenewRequest) (backend.Grant, error) {
			if ho, ht, ok := holder(ctx, req.Key); ok {
				req.Owner, req.Token = ho, ht
			}
			g, err := next(ctx, req)
			return shift(req.Key, g, err)
		},
		OnRelease: func(ctx context.Context, next faultbackend.ReleaseFunc, key string, o backend.Owner, token uint64) error {
			ho, ht, ok := holder(ctx, key)
			if !ok {
				return next(ctx, key, o, token)
			}
			mu.Lock()
			offset[key] = ht
			mu.Unlock()
			return next(ctx, key, ho, ht)
		},
	}
}

func TestNegativeControl(t *testing.T) {
	h := conformance.Harness{
		New:  func(testing.TB) backend.Leases { return memory.New() },
		Want: memory.New().Capabilities(),
	}
	wrap := func(b backend.Backend) backend.Backend { return broken(b) }
	conformance.NegativeControl(t, h, wrap,
		"TokensIncreaseOver1000Handovers",
		"TokensIncreaseAcrossReleasePruneExpiry",
		"StaleHolderCannotRenewOrRelease",
		"SameInstanceNameOtherNonce",
		"ExclusionUnder64Goroutines",
		"LockWatchdogKeepsLeaseAlive",
		"Randomized",
	)
}

// staleYours answers a retried Acquire (same owner nonce) with the grant it
// saw before, without renewing it: the contract before issue #14, under
// which a late-applied first attempt leaves a lease shorter than the answer
// implies.
func staleYours(b backend.Backend) *faultbackend.Backend {
	var mu sync.Mutex
	grants := map[string]backend.Grant{} // key + owner -> first grant seen
	return &faultbackend.Backend{
		Next: b,
		OnAcquire: func(ctx context.Context, next faultbackend.AcquireFunc, key string, o backend.Owner, ttl time.Duration) (backend.Grant, error) {
			id := key + "\x00" + o.String()
			if l, err := b.Get(ctx, key); err == nil && l.Owner == o {
				mu.Lock()
				g, ok := grants[id]
				mu.Unlock()
				if ok {
					return g, nil
				}
			}
			g, err := next(ctx, key, o, ttl)
			if err == nil {
				mu.Lock()
				grants[id] = g
				mu.Unlock()
			}
			return g, err
		},
	}
}

// TestStaleYours: the backend check catches a retry that does not renew,
// and the Locker alone still never outlives the lease (it counts from the
// earliest attempt that may have been applied and confirms with a Renew).
func TestStaleYours(t *testing.T) {
	h := conformance.Harness{
		New:  func(testing.TB) backend.Leases { return memory.New() },
		Want: memory.New().Capabilities(),
	}
	wrap := func(b backend.Backend) backend.Backend {
		return staleYours(b)
	}
	conformance.NegativeControl(t, h, wrap, "RetriedAcquireRenewsExpiry")
	conformance.RunWrapped(t, h, wrap, "LockLateAppliedAttemptNeverOutlivesLease", "LockRetryAfterLostReplyAnswersYours")
}

// noLimit is a deliberately wrong ledger: claims and reclaims ignore the
// job's MaxRunning.
func noLimit(b backend.Backend) *faultbackend.Backend {
	return &faultbackend.Backend{
		Next: b,
		OnClaim: func(ctx context.Context, next faultbackend.ClaimFunc, req backend.ClaimRequest) (backend.Grant, error) {
			req.MaxRunning = 0
			return next(ctx, req)
		},
		OnReclaim: func(ctx context.Context, next faultbackend.ReclaimFunc, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
			req.MaxRunning = 0
			return next(ctx, req)
		},
	}
}

// TestNegativeControlLedger: the randomized check catches a ledger that lets
// more occurrences of a job run at once than its MaxRunning.
func TestNegativeControlLedger(t *testing.T) {
	h := conformance.Harness{
		New:  func(testing.TB) backend.Leases { return memory.New() },
		Want: memory.New().Capabilities(),
	}
	conformance.NegativeControl(t, h, func(b backend.Backend) backend.Backend { return noLimit(b) }, "Randomized")
}
