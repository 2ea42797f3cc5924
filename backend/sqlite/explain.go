package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/backend"
)

var (
	_ backend.Explainer   = (*Backend)(nil)
	_ backend.ServerClock = (*Backend)(nil)
)

// Explain implements backend.Explainer: the synchronous setting decides
// DurableFencing.
func (b *Backend) Explain(ctx context.Context) ([]backend.Reason, error) {
	// Not in internal/sqlledger: the settings each SQL database reads, and
	// what they mean, are its own; only the shape is alike.
	var level int
	if err := b.db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&level); err != nil {
		return nil, fmt.Errorf("sqlite: %s: read synchronous: %w", b.path, err)
	}
	why := fmt.Sprintf("synchronous=%d (FULL or EXTRA): every commit is fsync'd, so a grant survives a power failure", level)
	if level < 2 {
		why = fmt.Sprintf("synchronous=%d (OFF or NORMAL): a power failure can lose the last commits, so tokens can go backwards after one", level)
	}
	return []backend.Reason{
		{Capability: "ServerClock", Why: "expiry is judged by the host's clock, which every process on the host shares (one host only)"},
		{Capability: "DurableFencing", Why: why},
	}, nil
}

// ServerTime implements backend.ServerClock: expiry is judged by this
// host's clock.
func (b *Backend) ServerTime(context.Context) (time.Time, error) { return time.Now(), nil }
