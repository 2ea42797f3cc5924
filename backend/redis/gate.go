package redis

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
)

// gate queues requests in front of the client's connection pool, one slot
// per pooled connection. go-redis reports a context that ended while a
// request waited for a connection with the same error as one that ended
// after the request was sent, so the backend could not tell "never sent"
// from "may have been applied", and a crowd of short-deadline Acquires
// (10,000 goroutines, 50 ms each) all came back ErrIndeterminate. A request
// whose context ends in the gate was never sent: it reports
// backend.ErrNotApplied, and the caller needs no cleanup.
//
// The gate has as many slots as the client's PoolSize, so a request that
// holds a slot finds a connection at once unless other code shares the
// client; then it may still wait inside go-redis, and a context that ends
// there is reported as an unknown outcome, as before. Clients whose pool
// size cannot be read (Cluster, Ring) get no gate.
type gate chan struct{}

func newGate(c goredis.UniversalClient) gate {
	var n int
	switch c := c.(type) {
	case *goredis.Client:
		n = c.Options().PoolSize
	default:
		return nil
	}
	if n <= 0 {
		return nil
	}
	return make(gate, n)
}

// enter takes a slot, or fails with ErrNotApplied when ctx ends first.
// The returned func gives the slot back.
func (g gate) enter(ctx context.Context, op, key string) (func(), error) {
	if g == nil {
		return func() {}, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("redis: %s %q: %w: %w", op, key, backend.ErrNotApplied, context.Cause(ctx))
	}
	select {
	case g <- struct{}{}:
		return g.leave, nil
	default:
	}
	select {
	case g <- struct{}{}:
		return g.leave, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("redis: %s %q: %w: %w", op, key, backend.ErrNotApplied, context.Cause(ctx))
	}
}

func (g gate) leave() { <-g }
