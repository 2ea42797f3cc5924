package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/backend"
)

var (
	_ backend.Explainer           = (*Backend)(nil)
	_ backend.ServerClock         = (*Backend)(nil)
	_ backend.CapabilityRefresher = (*Backend)(nil)
)

// Explain implements backend.Explainer: fsync and synchronous_commit decide
// DurableFencing.
func (b *Backend) Explain(ctx context.Context) ([]backend.Reason, error) {
	// Not in internal/sqlledger: the settings each SQL database reads, and
	// what they mean, are its own; only the shape is alike.
	var fsync, syncCommit string
	err := b.pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit')`).Scan(&fsync, &syncCommit)
	if err != nil {
		return nil, fmt.Errorf("postgres: read fsync and synchronous_commit: %w", err)
	}
	why := fmt.Sprintf("fsync %s, synchronous_commit %s: COMMIT returns after the WAL is flushed, so a grant survives a crash of the server (a fail-over to a standby needs a synchronous one, not checked)", fsync, syncCommit)
	if fsync != "on" || syncCommit == "off" {
		why = fmt.Sprintf("fsync %s, synchronous_commit %s: a crash can lose the last commits, so tokens can go backwards after one", fsync, syncCommit)
	}
	return []backend.Reason{{Capability: "DurableFencing", Why: why}}, nil
}

// ServerTime implements backend.ServerClock with clock_timestamp(), the
// clock every statement judges expiry by.
func (b *Backend) ServerTime(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := b.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t)
	return t, err
}
