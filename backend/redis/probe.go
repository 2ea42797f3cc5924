package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
)

var _ backend.CapabilityRefresher = (*Backend)(nil)

// nodeConfig is what one node's configuration says.
type nodeConfig struct {
	// configErr is why CONFIG GET could not be read (refused by an ACL,
	// renamed, or answered nothing); infoErr, why INFO replication could
	// not. What they would decide is then unknown, and not claimed.
	configErr, infoErr error
	policy             string
	appendonly         string
	appendfsync        string
	events             string
	role               string
	replicas           int
}

// Refresh reads the server's configuration again and recomputes
// Capabilities (see the package documentation for the rules), as
// RefreshCapabilities does.
func (b *Backend) Refresh(ctx context.Context) error {
	_, err := b.RefreshCapabilities(ctx)
	return err
}

// RefreshCapabilities implements backend.CapabilityRefresher: it reads
// every node's configuration again and returns the declaration it decides,
// which Capabilities returns from then on. If the configuration cannot be
// read (the server is unreachable), SafeFencing and DurableFencing are
// declared false until a reading succeeds, and the error says why; a
// CONFIG GET or INFO the server refuses is no error, but what it would
// decide is declared false too (Explain says why).
func (b *Backend) RefreshCapabilities(ctx context.Context) (backend.Capabilities, error) {
	_, err := b.refresh(ctx)
	return b.Capabilities(), err
}

// refresh reads the configuration, stores the declaration it decides and
// reports whether every node sends expired-key events.
func (b *Backend) refresh(ctx context.Context) (events bool, err error) {
	c := backend.Capabilities{
		Name:           "redis",
		ServerClock:    true,
		PushEvents:     true,
		MultiProcess:   true,
		MinTTL:         MinTTL,
		TTLGranularity: TTLGranularity,
		ReadAt:         time.Now(),
	}
	defer func() { b.caps.Offer(c) }()
	nodes, sharded, ring, err := b.readNodes(ctx)
	if err != nil {
		return false, fmt.Errorf("redis: read server configuration (SafeFencing and DurableFencing are declared false until it can be read): %w", err)
	}
	safe, durable, events := len(nodes) > 0 && !ring, len(nodes) > 0 && !ring, len(nodes) > 0 && !sharded
	for _, n := range nodes {
		safe = safe && n.configErr == nil && n.policy == "noeviction"
		durable = durable && n.infoErr == nil && n.appendonly == "yes" && n.appendfsync == "always" && n.role == "master" && n.replicas == 0
		events = events && strings.Contains(n.events, "E") && (strings.Contains(n.events, "x") || strings.Contains(n.events, "A"))
	}
	c.SafeFencing, c.DurableFencing = safe, safe && durable
	return events, nil
}

// readNodes reads the configuration of every node the client reaches.
func (b *Backend) readNodes(ctx context.Context) (nodes []nodeConfig, sharded, ring bool, err error) {
	var mu sync.Mutex
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
	return nodes, sharded, ring, err
}

type cmdable interface {
	ConfigGet(ctx context.Context, parameter string) *goredis.MapStringStringCmd
	Info(ctx context.Context, section ...string) *goredis.StringCmd
}

// answered reports whether err is the server's answer (an error reply:
// NOPERM, an unknown command), as opposed to no answer at all.
func answered(err error) bool {
	var re goredis.Error
	return errors.As(err, &re)
}

// probeNode reads one node's configuration. A command the server refuses
// leaves what it would decide unknown (configErr, infoErr); an error
// without an answer from the server is returned.
func probeNode(ctx context.Context, c cmdable) (nodeConfig, error) {
	var n nodeConfig
	info, err := c.Info(ctx, "replication").Result()
	switch {
	case err != nil && !answered(err):
		return n, err
	case err != nil:
		n.infoErr = fmt.Errorf("INFO replication: %w", err)
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
		if err != nil && !answered(err) {
			return n, err
		}
		if err != nil {
			// CONFIG may be renamed or forbidden by ACL (managed Redis):
			// the guarantees cannot be verified, so none is claimed.
			n.configErr = fmt.Errorf("CONFIG GET %s: %w", p, err)
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
	if n.policy == "" {
		n.configErr = errors.New("CONFIG GET maxmemory-policy answered nothing")
	}
	return n, nil
}
