package mysql

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

// Explain implements backend.Explainer: innodb_flush_log_at_trx_commit
// decides DurableFencing.
func (b *Backend) Explain(ctx context.Context) ([]backend.Reason, error) {
	// Not in internal/sqlledger: the settings each SQL database reads, and
	// what they mean, are its own; only the shape is alike.
	var flush int
	if err := b.db.QueryRowContext(ctx, `SELECT @@innodb_flush_log_at_trx_commit`).Scan(&flush); err != nil {
		return nil, fmt.Errorf("mysql: read innodb_flush_log_at_trx_commit: %w", err)
	}
	why := "innodb_flush_log_at_trx_commit 1: the redo log is flushed at every commit, so a grant survives a crash of the server"
	if flush != 1 {
		why = fmt.Sprintf("innodb_flush_log_at_trx_commit %d: the redo log is flushed about once a second, so a crash can lose the last grants and tokens can go backwards after one", flush)
	}
	return []backend.Reason{{Capability: "DurableFencing", Why: why}}, nil
}

// ServerTime implements backend.ServerClock with NOW(6), the clock every
// statement judges expiry by, read as a Unix time so that no session time
// zone gets in the way.
func (b *Backend) ServerTime(ctx context.Context) (time.Time, error) {
	var us int64
	if err := b.db.QueryRowContext(ctx, `SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)`).Scan(&us); err != nil {
		return time.Time{}, err
	}
	return time.UnixMicro(us), nil
}
