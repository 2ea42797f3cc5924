package redis

import (
	"context"
	"fmt"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
)

// nodeConfig is what one node's configuration says.
type nodeConfig struct {
	readable    bool // CONFIG GET answered
	policy      string
	appendonly  string
	appendfsync string
	events      string
	role        string
	replicas    int
}

// Refresh reads the server's configuration again and recomputes
// Capabilities (see the package documentation for the rules).
func (b *Backend) Refresh(ctx context.Context) error {
	var (
		mu    sync.Mutex
		nodes []nodeConfig
	)
	probe := func(ctx context.Context, c *goredis.Client) error {
		n, err := probeNode(ctx, c)
		if err != nil {
			return err
		}
		mu.Lock()
		nodes = append(nodes, n)
		mu.Unlock()
		return nil
	}
	sharded, ring := false, false
	var err error
	switch c := b.c.(type) {
	case *goredis.ClusterClient:
		sharded = true
		err = c.ForEachShard(ctx, probe)
	case *goredis.Ring:
		sharded, ring = true, true
		err = c.ForEachShard(ctx, probe)
	case *goredis.Client:
		err = probe(ctx, c)
	default:
		// Another UniversalClient (an AutoPipeliner, a wrapper): probe
		// through it as one node.
		var n nodeConfig
		n, err = probeNode(ctx, b.c)
		nodes = append(nodes, n)
	}
	if err != nil {
		return fmt.Errorf("redis: read server configuration: %w", err)
	}
	safe, durable, events := len(nodes) > 0 && !ring, len(nodes) > 0 && !ring, len(nodes) > 0 && !sharded
	for _, n := range nodes {
		safe = safe && n.readable && n.policy == "noeviction"
		durable = durable && n.appendonly == "yes" && n.appendfsync == "always" && n.role == "master" && n.replicas == 0
		events = events && strings.Contains(n.events, "E") && (strings.Contains(n.events, "x") || strings.Contains(n.events, "A"))
	}
	b.caps.Store(&backend.Capabilities{
		Name:           "redis",
		ServerClock:    true,
		SafeFencing:    safe,
		DurableFencing: safe && durable,
		PushEvents:     true,
		MultiProcess:   true,
		MinTTL:         MinTTL,
		TTLGranularity: TTLGranularity,
	})
	b.expEvt.Store(events)
	return nil
}

type cmdable interface {
	ConfigGet(ctx context.Context, parameter string) *goredis.MapStringStringCmd
	Info(ctx context.Context, section ...string) *goredis.StringCmd
}

func probeNode(ctx context.Context, c cmdable) (nodeConfig, error) {
	var n nodeConfig
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return n, err
	}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "role":
			n.role = v
		case "connected_slaves":
			fmt.Sscan(v, &n.replicas)
		}
	}
	for _, p := range []string{"maxmemory-policy", "appendonly", "appendfsync", "notify-keyspace-events"} {
		m, err := c.ConfigGet(ctx, p).Result()
		if err != nil {
			// CONFIG may be renamed or forbidden by ACL (managed Redis):
			// the guarantees cannot be verified, so none is claimed.
			return n, nil
		}
		switch p {
		case "maxmemory-policy":
			n.policy = m[p]
		case "appendonly":
			n.appendonly = m[p]
		case "appendfsync":
			n.appendfsync = m[p]
		case "notify-keyspace-events":
			n.events = m[p]
		}
	}
	n.readable = n.policy != ""
	return n, nil
}
