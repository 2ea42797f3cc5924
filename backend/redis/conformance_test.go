package redis_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/internal/testserver"
)

var prefixes atomic.Int64

// client returns a go-redis client for addr, closed at the end of the test.
func client(t testing.TB, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// open returns a backend on addr with a fresh key prefix (or the given one).
func open(t testing.TB, addr string, prefix ...string) *redis.Backend {
	t.Helper()
	p := fmt.Sprintf("t%d:", prefixes.Add(1))
	if len(prefix) > 0 {
		p = prefix[0]
	}
	b, err := redis.New(client(t, addr), redis.WithPrefix(p))
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func want(durable bool) backend.Capabilities {
	return backend.Capabilities{
		Name: "redis", ServerClock: true, SafeFencing: true, DurableFencing: durable,
		PushEvents: true, MultiProcess: true, MinTTL: redis.MinTTL, TTLGranularity: redis.TTLGranularity,
	}
}

// TestConformance runs the suite twice: on a server with appendonly yes +
// appendfsync always (DurableFencing declared, and tested by restarting the
// server in Reopen), and on a server without persistence (DurableFencing
// false).
func TestConformance(t *testing.T) {
	t.Run("durable", func(t *testing.T) {
		srv := testserver.Redis(t, "--appendonly", "yes", "--appendfsync", "always")
		conformance.Run(t, conformance.Harness{
			New:  func(t testing.TB) backend.Leases { return open(t, srv.Addr()) },
			Want: want(true),
			Reopen: func(t testing.TB, b backend.Leases) backend.Leases {
				p := b.(*redis.Backend).Prefix()
				b.Close()
				srv.Restart()
				return open(t, srv.Addr(), p)
			},
		})
	})
	t.Run("volatile", func(t *testing.T) {
		if testing.Short() {
			t.Skip("short: the durable run covers the suite")
		}
		srv := testserver.Redis(t)
		conformance.Run(t, conformance.Harness{
			New:  func(t testing.TB) backend.Leases { return open(t, srv.Addr()) },
			Want: want(false),
		})
	})
}

// TestCapabilitiesFromLiveConfig: an evicting policy withdraws SafeFencing,
// everysec withdraws DurableFencing, and a replica attached to the primary
// (failover possible) withdraws DurableFencing — each read from the server.
func TestCapabilitiesFromLiveConfig(t *testing.T) {
	srv := testserver.Redis(t, "--appendonly", "yes", "--appendfsync", "always")
	ctx := context.Background()
	b := open(t, srv.Addr())
	if got := b.Capabilities(); got != want(true) {
		t.Fatalf("capabilities %+v, want %+v", got, want(true))
	}
	c := client(t, srv.Addr())
	set := func(k, v string) {
		t.Helper()
		if err := c.ConfigSet(ctx, k, v).Err(); err != nil {
			t.Fatalf("CONFIG SET %s %s: %v", k, v, err)
		}
		if err := b.Refresh(ctx); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
	}
	set("appendfsync", "everysec")
	if got := b.Capabilities(); !got.SafeFencing || got.DurableFencing {
		t.Errorf("appendfsync everysec: %+v, want safe but not durable", got)
	}
	set("appendfsync", "always")
	set("maxmemory-policy", "allkeys-lru")
	if got := b.Capabilities(); got.SafeFencing || got.DurableFencing {
		t.Errorf("maxmemory-policy allkeys-lru: %+v, want neither safe nor durable fencing", got)
	}
	set("maxmemory-policy", "volatile-ttl")
	if got := b.Capabilities(); got.SafeFencing {
		t.Errorf("maxmemory-policy volatile-ttl: SafeFencing declared")
	}
	set("maxmemory-policy", "noeviction")
	if got := b.Capabilities(); got != want(true) {
		t.Fatalf("back to noeviction: %+v", got)
	}
	// Attach a replica: a failover could now promote a node that missed writes.
	replica := testserver.Redis(t, "--replicaof", "127.0.0.1", fmt.Sprint(srv.Port()))
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := b.Refresh(ctx); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
		if !b.Capabilities().DurableFencing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s attached, DurableFencing still declared", replica.Addr())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !b.Capabilities().SafeFencing {
		t.Errorf("a replica does not make counters evictable: SafeFencing withdrawn")
	}
	plain := open(t, testserver.Redis(t).Addr())
	if got := plain.Capabilities(); got != want(false) {
		t.Errorf("server without persistence: %+v, want %+v", got, want(false))
	}
}
