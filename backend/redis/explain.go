package redis

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
)

var (
	_ backend.Explainer   = (*Backend)(nil)
	_ backend.ServerClock = (*Backend)(nil)
)

func reason(capability, why string) backend.Reason {
	return backend.Reason{Capability: capability, Why: why}
}

// Explain implements backend.Explainer: it reads the node's configuration
// as Refresh does and says what decides SafeFencing and DurableFencing.
func (b *Backend) Explain(ctx context.Context) ([]backend.Reason, error) {
	switch b.c.(type) {
	case *goredis.ClusterClient, *goredis.Ring:
		return []backend.Reason{reason("SafeFencing", "a sharded client (cluster or ring): Refresh checks every shard's configuration, see the package doc")}, nil
	}
	n, err := probeNode(ctx, b.c)
	if err != nil {
		return nil, fmt.Errorf("redis: read server configuration: %w", err)
	}
	if !n.readable {
		why := "CONFIG GET is refused (renamed, or forbidden by ACL): maxmemory-policy cannot be verified, so no fencing guarantee is claimed"
		return []backend.Reason{reason("SafeFencing", why), reason("DurableFencing", why)}, nil
	}
	var rs []backend.Reason
	if n.policy == "noeviction" {
		rs = append(rs, reason("SafeFencing", "maxmemory-policy noeviction: the token counters are never evicted"))
	} else {
		rs = append(rs, reason("SafeFencing", fmt.Sprintf("maxmemory-policy %s: under memory pressure Redis may evict a token counter, and that key's tokens start again from 1", n.policy)))
	}
	var d string
	switch {
	case n.appendonly != "yes":
		d = fmt.Sprintf("appendonly %s: a restart of the server forgets the token counters, so tokens go backwards after a restart", n.appendonly)
	case n.appendfsync != "always":
		d = fmt.Sprintf("appendonly yes but appendfsync %s: a crash loses the last writes, so tokens can go backwards after a crash", n.appendfsync)
	case n.role != "master" || n.replicas != 0:
		d = fmt.Sprintf("role %s with %d replicas: a fail-over to a replica that missed a grant hands its token out again", n.role, n.replicas)
	case n.policy != "noeviction":
		d = "appendonly yes and appendfsync always, but the counters may be evicted (see SafeFencing)"
	default:
		d = "appendonly yes, appendfsync always, one primary without replicas: every grant is on disk before its reply"
	}
	return append(rs, reason("DurableFencing", d)), nil
}

// ServerTime implements backend.ServerClock with TIME.
func (b *Backend) ServerTime(ctx context.Context) (time.Time, error) {
	return b.c.Time(ctx).Result()
}
