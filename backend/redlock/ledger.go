package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// Wait implements backend.Notifier: the channel closes when a quorum of
// nodes reports the key released (pushed) or expired (each node's timer at
// its remaining TTL), or free, or when ctx ends. A node that cannot be
// reached never counts.
func (b *Backend) Wait(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := backend.CheckKey("key", key); err != nil {
		return nil, err
	}
	if err := b.check(); err != nil {
		return nil, err
	}
	out := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	var once sync.Once
	done := func() { once.Do(func() { close(out); cancel() }) }
	context.AfterFunc(wctx, done)
	var fired atomic.Int32
	for _, n := range b.nodes {
		go func() {
			ch, err := n.w.Wait(wctx, key)
			if err != nil {
				return
			}
			<-ch
			if int(fired.Add(1)) == b.quorum {
				done()
			}
		}()
	}
	return out, nil
}

func unsupported(op string) error { return fmt.Errorf("%s: %w", op, ErrUnsupported) }

// Claim implements backend.Ledger through the delegated ledger.
func (b *Backend) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	if b.ledger == nil {
		return backend.Grant{}, unsupported("claim")
	}
	return b.ledger.Claim(ctx, req)
}

// Heartbeat implements backend.Ledger through the delegated ledger.
func (b *Backend) Heartbeat(ctx context.Context, job string, at time.Time, o backend.Owner, token uint64, ttl time.Duration) error {
	if b.ledger == nil {
		return unsupported("heartbeat")
	}
	return b.ledger.Heartbeat(ctx, job, at, o, token, ttl)
}

// Finish implements backend.Ledger through the delegated ledger.
func (b *Backend) Finish(ctx context.Context, job string, at time.Time, o backend.Owner, token uint64, out backend.Outcome) error {
	if b.ledger == nil {
		return unsupported("finish")
	}
	return b.ledger.Finish(ctx, job, at, o, token, out)
}

// Reclaim implements backend.Ledger through the delegated ledger.
func (b *Backend) Reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	if b.ledger == nil {
		return backend.Grant{}, backend.Run{}, unsupported("reclaim")
	}
	return b.ledger.Reclaim(ctx, req)
}

// Abandon implements backend.Ledger through the delegated ledger.
func (b *Backend) Abandon(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	if b.ledger == nil {
		return backend.Run{}, unsupported("abandon")
	}
	return b.ledger.Abandon(ctx, job, at)
}

// GetRun implements backend.Ledger through the delegated ledger.
func (b *Backend) GetRun(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	if b.ledger == nil {
		return backend.Run{}, unsupported("get run")
	}
	return b.ledger.GetRun(ctx, job, at)
}

// HighWater implements backend.Ledger through the delegated ledger.
func (b *Backend) HighWater(ctx context.Context, job string) (time.Time, string, error) {
	if b.ledger == nil {
		return time.Time{}, "", unsupported("high water")
	}
	return b.ledger.HighWater(ctx, job)
}

// ListRuns implements backend.Ledger through the delegated ledger.
func (b *Backend) ListRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	if b.ledger == nil {
		return nil, unsupported("list runs")
	}
	return b.ledger.ListRuns(ctx, f)
}

// Prune implements backend.Ledger through the delegated ledger.
func (b *Backend) Prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	if b.ledger == nil {
		return 0, unsupported("prune")
	}
	return b.ledger.Prune(ctx, olderThan, batch)
}
