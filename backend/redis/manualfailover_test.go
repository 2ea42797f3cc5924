package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// load runs acquire/release pairs on a few keys and claims of successive
// occurrences of one job until stop, and records what was reported done.
type load struct {
	b  *redis.Backend
	mu sync.Mutex
	// maxToken is, per key, the highest token of a reported grant.
	maxToken map[string]uint64
	// claimed are the occurrences whose claim was reported, by owner.
	claimed map[time.Time]backend.Owner
	// backwards records a reported token not above the last one reported
	// on its key.
	backwards []string
	wg        sync.WaitGroup
}

func startLoad(b *redis.Backend, keys int, stop <-chan struct{}) *load {
	l := &load{b: b, maxToken: map[string]uint64{}, claimed: map[time.Time]backend.Owner{}}
	for i := 0; i < keys; i++ {
		key := fmt.Sprintf("mf-%d", i)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				o := backend.Owner{Instance: "w", Nonce: backend.NewNonce()}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				g, err := b.Acquire(ctx, key, o, 500*time.Millisecond)
				if err == nil {
					l.mu.Lock()
					if g.Token <= l.maxToken[key] {
						l.backwards = append(l.backwards, fmt.Sprintf("%s: token %d after %d", key, g.Token, l.maxToken[key]))
					}
					l.maxToken[key] = g.Token
					l.mu.Unlock()
					_ = b.Release(ctx, key, o, g.Token)
				}
				cancel()
			}
		}()
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		base := time.Now().Truncate(time.Second)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			at := base.Add(time.Duration(i) * time.Millisecond)
			o := backend.Owner{Instance: "c", Nonce: backend.NewNonce()}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := b.Claim(ctx, backend.ClaimRequest{Job: "mf-job", ScheduledAt: at, SpecVersion: "v1", Owner: o,
				TTL: time.Minute, MaxEarly: time.Hour, MaxLate: time.Hour})
			cancel()
			if err == nil {
				l.mu.Lock()
				l.claimed[backend.Instant(at)] = o
				l.mu.Unlock()
			}
		}
	}()
	return l
}

// check verifies, after the failover, that every lease held across it is
// still held by its owner with its token, that a new grant on each loaded
// key gets a token above every one reported, and that every reported
// claim is in the ledger with its owner.
func (l *load) check(t *testing.T, held map[string]backend.Grant) {
	t.Helper()
	ctx := context.Background()
	if len(l.backwards) > 0 {
		t.Errorf("tokens went backwards during the failover: %s", strings.Join(l.backwards, "; "))
	}
	for key, g := range held {
		got, err := l.b.Get(ctx, key)
		if err != nil || got.Token != g.Token || got.Owner.Instance != "holder" {
			t.Errorf("lease %s held across the failover with token %d: now %+v, %v", key, g.Token, got, err)
		}
	}
	for key, max := range l.maxToken {
		o := backend.Owner{Instance: "after", Nonce: backend.NewNonce()}
		var (
			g   backend.Grant
			err error
		)
		// Held until a lease of an unknown outcome expires.
		if !eventually.Within(10*time.Second, func() bool {
			g, err = l.b.Acquire(ctx, key, o, time.Minute)
			var heldErr *backend.HeldError
			if err != nil && !errors.As(err, &heldErr) {
				t.Fatalf("acquire %s after the failover: %v", key, err)
			}
			return err == nil
		}) {
			t.Fatalf("acquire %s after the failover: %v", key, err)
		}
		if g.Token <= max {
			t.Errorf("%s: token %d after the failover, but %d was reported before: tokens went backwards", key, g.Token, max)
		}
	}
	missing := 0
	for at, o := range l.claimed {
		r, err := l.b.GetRun(ctx, "mf-job", at)
		if err != nil || r.Owner != o {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d claims reported before the failover are lost", missing, len(l.claimed))
	}
	t.Logf("%d keys, %d reported claims checked", len(l.maxToken), len(l.claimed))
}

// holdLeases acquires n leases that stay held across the failover.
func holdLeases(t *testing.T, b *redis.Backend, n int) map[string]backend.Grant {
	t.Helper()
	held := map[string]backend.Grant{}
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("held-%d", i)
		g, err := b.Acquire(context.Background(), key, backend.Owner{Instance: "holder", Nonce: backend.NewNonce()}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		held[key] = g
	}
	return held
}

// TestClusterFailoverUnderLoad: CLUSTER FAILOVER (the coordinated kind: the
// primary stops taking writes until its replica has caught up) on every
// shard while leases are held and acquires and claims run: no reported
// grant or claim is lost, and no token goes backwards.
func TestClusterFailoverUnderLoad(t *testing.T) {
	rc := testserver.StartRedisCluster(t)
	b := openCluster(t, rc)
	held := holdLeases(t, b, 8)
	stop := make(chan struct{})
	l := startLoad(b, 6, stop)
	var replicas []string
	for _, n := range rc.Nodes {
		if role, _ := testserver.Role(n.Addr()); role == "slave" {
			replicas = append(replicas, n.Addr())
		}
	}
	for _, r := range replicas {
		// A manual failover that cannot finish within Redis's 5 s
		// (a loaded host) is abandoned by the server, which then keeps its
		// roles: ask again, up to a minute.
		var asked time.Time
		eventually.True(t, 60*time.Second, fmt.Sprintf("replica %s took over", r), func() bool {
			if role, _ := testserver.Role(r); role == "master" {
				return true
			}
			if time.Since(asked) > 6*time.Second {
				if _, err := testserver.RedisCommand(r, "CLUSTER", "FAILOVER"); err != nil {
					t.Fatalf("CLUSTER FAILOVER on %s: %v", r, err)
				}
				asked = time.Now()
			}
			return false
		})
	}
	rc.WaitOK(t, 30*time.Second)
	close(stop)
	l.wg.Wait()
	l.check(t, held)
}

// TestSentinelFailoverUnderLoad: SENTINEL FAILOVER while leases are held
// and acquires and claims run. A Sentinel failover does not stop the old
// primary first: it may take writes until it learns it was demoted, and
// those are lost. With wait_replicas covering both replicas no such write
// is reported (WAIT cannot be answered by a replica that left), so no
// reported grant or claim is lost and no token goes backwards.
func TestSentinelFailoverUnderLoad(t *testing.T) {
	s := testserver.StartRedisSentinel(t)
	b := openSentinel(t, s, redis.WithWaitReplicas(2, time.Second))
	held := holdLeases(t, b, 8)
	stop := make(chan struct{})
	l := startLoad(b, 6, stop)
	old, err := s.Master()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testserver.RedisCommand(s.Sentinels[0].Addr(), "SENTINEL", "FAILOVER", testserver.RedisSentinelMaster); err != nil {
		t.Fatal(err)
	}
	var m string
	if !eventually.Within(60*time.Second, func() bool {
		if m, err = s.Master(); err != nil || m == old {
			return false
		}
		if role, _ := testserver.Role(m); role != "master" {
			return false
		}
		info, err := testserver.RedisCommand(m, "INFO", "replication")
		return err == nil && strings.Contains(info, "connected_slaves:2")
	}) {
		t.Fatalf("no failover: master %q, %v", m, err)
	}
	// Keep the load on the new primary for a moment of real traffic.
	waitCount(t, l, 20)
	close(stop)
	l.wg.Wait()
	l.check(t, held)
}

// waitCount waits until l has reported n more claims.
func waitCount(t *testing.T, l *load, n int) {
	t.Helper()
	l.mu.Lock()
	start := len(l.claimed)
	l.mu.Unlock()
	var got int
	if !eventually.Within(30*time.Second, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		got = len(l.claimed)
		return got >= start+n
	}) {
		t.Fatalf("load made %d claims after the failover, want %d", got-start, n)
	}
}
