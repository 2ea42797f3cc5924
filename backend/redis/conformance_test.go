package redis_test

import (
	"context"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/conformance"
	"github.com/leasehold/leasehold/backend/conformance/faultkit"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
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

// declared is b's declaration without the time it was read.
func declared(b backend.Leases) backend.Capabilities {
	c := b.Capabilities()
	c.ReadAt = time.Time{}
	return c
}

// wire opens two backends on srv's server through the suite's proxies,
// sharing a fresh prefix.
func wire(srv *testserver.Server) *conformance.Wire {
	return &conformance.Wire{
		Framer: chaos.RESP,
		Open: func(t testing.TB, wrap func(string) string) (backend.Leases, backend.Leases) {
			p := fmt.Sprintf("t%d:", prefixes.Add(1))
			return open(t, wrap(srv.Addr()), p), open(t, wrap(srv.Addr()), p)
		},
	}
}

// faultTTL is the holder's TTL in the process-fault scenarios.
const faultTTL = 1500 * time.Millisecond

// faultKit describes the backend to the process-fault scenarios: a fresh
// key prefix on the server at addr, reached as user (nil: the default
// user). The namespace is a redis URL without its host (see openAt).
func faultKit(addr string, user *url.Userinfo) faultkit.Kit {
	return faultKitIn(addr, user, fmt.Sprintf("t%d:", prefixes.Add(1)))
}

// faultKitIn is faultKit with the given prefix.
func faultKitIn(addr string, user *url.Userinfo, prefix string) faultkit.Kit {
	ns := &url.URL{Scheme: "redis", User: user, Path: "/", RawQuery: url.Values{"prefix": {prefix}}.Encode()}
	return faultkit.Kit{
		Open: openAt, Addr: addr, NS: ns.String(), TTL: faultTTL,
		// The server expires the key at the TTL; the waiter retries within
		// its 100 ms backoff (+400 ms scheduling slack).
		ExpiryBound: faultTTL + 100*time.Millisecond + 400*time.Millisecond,
	}
}

// openAt opens the backend the redis URL ns names (user, prefix) on the
// server at addr, closed at the end of the test.
func openAt(t testing.TB, addr, ns string) backend.Leases {
	t.Helper()
	u, err := url.Parse(ns)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	b, err := redis.Open(context.Background(), u.String())
	if err != nil {
		t.Fatalf("redis.Open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestFaultHelper is the helper process of the fault kit.
func TestFaultHelper(t *testing.T) { faultkit.Helper(t, faultkit.Kit{Open: openAt}) }

func want(durable bool) backend.Capabilities {
	return backend.Capabilities{
		Name: "redis", ServerClock: true, SafeFencing: true, DurableFencing: durable,
		PushEvents: true, MultiProcess: true, MinTTL: redis.MinTTL, TTLGranularity: redis.TTLGranularity,
	}
}

// TestConformance runs the suite on a server with appendonly yes +
// appendfsync always: DurableFencing declared, and tested by restarting
// the server in Reopen. TestConformanceVolatile runs it without
// persistence.
func TestConformance(t *testing.T) {
	srv := testserver.Redis(t, "--appendonly", "yes", "--appendfsync", "always")
	conformance.Run(t, conformance.Harness{
		New:  func(t testing.TB) backend.Leases { return open(t, srv.Addr()) },
		Want: want(true),
		Wire: wire(srv),
		Reopen: func(t testing.TB, b backend.Leases) backend.Leases {
			p := b.(*redis.Backend).Prefix()
			b.Close()
			srv.Restart()
			return open(t, srv.Addr(), p)
		},
		Process: func(t testing.TB) faultkit.Kit { return faultKit(srv.Addr(), nil) },
	})
}

// TestConformanceVolatile runs the suite on a server without persistence
// (DurableFencing false).
func TestConformanceVolatile(t *testing.T) {
	if testing.Short() {
		t.Skip("short: TestConformance covers the suite")
	}
	srv := testserver.Redis(t)
	conformance.Run(t, conformance.Harness{
		New:     func(t testing.TB) backend.Leases { return open(t, srv.Addr()) },
		Want:    want(false),
		Wire:    wire(srv),
		Process: func(t testing.TB) faultkit.Kit { return faultKit(srv.Addr(), nil) },
	})
}

// TestCapabilitiesFromLiveConfig: an evicting policy withdraws SafeFencing,
// everysec withdraws DurableFencing, and a replica attached to the primary
// (failover possible) withdraws DurableFencing — each read from the server.
func TestCapabilitiesFromLiveConfig(t *testing.T) {
	srv := testserver.Redis(t, "--appendonly", "yes", "--appendfsync", "always")
	ctx := context.Background()
	b := open(t, srv.Addr())
	if got := declared(b); got != want(true) {
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
	if got := declared(b); got != want(true) {
		t.Fatalf("back to noeviction: %+v", got)
	}
	// Attach a replica: a failover could now promote a node that missed writes.
	replica := testserver.Redis(t, "--replicaof", "127.0.0.1", fmt.Sprint(srv.Port()))
	if !eventually.Within(20*time.Second, func() bool {
		if err := b.Refresh(ctx); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
		return !b.Capabilities().DurableFencing
	}) {
		t.Fatalf("replica %s attached, DurableFencing still declared", replica.Addr())
	}
	if !b.Capabilities().SafeFencing {
		t.Errorf("a replica does not make counters evictable: SafeFencing withdrawn")
	}
	plain := open(t, testserver.Redis(t).Addr())
	if got := declared(plain); got != want(false) {
		t.Errorf("server without persistence: %+v, want %+v", got, want(false))
	}
}
