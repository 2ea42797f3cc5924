package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// openAs creates the ACL user with every permission but rules (and INFO,
// CONFIG GET for the probe) and opens a backend as that user.
func openAs(t *testing.T, addr, user string, rules ...any) *redis.Backend {
	t.Helper()
	admin := client(t, addr)
	args := append([]any{"ACL", "SETUSER", user, "reset", "on", ">pw-0123456789", "~*", "&*", "+@all"}, rules...)
	if err := admin.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", user, err)
	}
	b, err := redis.Open(context.Background(), "redis://"+user+":pw-0123456789@"+addr)
	if err != nil {
		t.Fatalf("Open as %s: %v", user, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestNoPermIsRefused: a user whose ACL refuses the scripts gets NOPERM
// before anything ran: the backend's error is ErrRefused and ErrNotApplied,
// and the Locker reports a refusal at once — not an indeterminate outcome,
// not "held by another owner", and without waiting for its deadline.
func TestNoPermIsRefused(t *testing.T) {
	srv := testserver.Redis(t)
	b := openAs(t, srv.Addr(), "noscripts", "-@scripting")
	ctx := context.Background()
	_, err := b.Acquire(ctx, "k", backend.Owner{Instance: "a", Nonce: backend.NewNonce()}, time.Minute)
	if !errors.Is(err, backend.ErrRefused) || !errors.Is(err, backend.ErrNotApplied) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("backend Acquire refused by ACL: %v, want ErrRefused and ErrNotApplied with the server's NOPERM", err)
	}
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance("a"))
	if err != nil {
		t.Fatal(err)
	}
	for name, acquire := range map[string]func(context.Context, string) (*leasehold.Lock, error){
		"TryAcquire": lk.TryAcquire, "Acquire": lk.Acquire,
	} {
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err := acquire(actx, "jobs/x")
		cancel()
		if !errors.Is(err, leasehold.ErrRefused) || errors.Is(err, leasehold.ErrOutcomeIndeterminate) || errors.Is(err, leasehold.ErrLockNotAcquired) ||
			errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s refused by ACL: %v, want ErrRefused only (not indeterminate, not held, not at its deadline)", name, err)
		} else if !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), `"jobs/x"`) {
			t.Errorf("%s refused by ACL: %q does not say refused and name the key", name, err)
		}
	}
}

// TestScriptRefusalIsRefused: an ACL that lets the scripts run but refuses
// a command inside one fails the script after its earlier commands ran:
// ErrRefused, not ErrNotApplied; the Locker does not retry it, and says the
// outcome is not known.
func TestScriptRefusalIsRefused(t *testing.T) {
	srv := testserver.Redis(t)
	b := openAs(t, srv.Addr(), "noset", "-set")
	ctx := context.Background()
	_, err := b.Acquire(ctx, "k", backend.Owner{Instance: "a", Nonce: backend.NewNonce()}, time.Minute)
	if !errors.Is(err, backend.ErrRefused) || errors.Is(err, backend.ErrNotApplied) {
		t.Fatalf("backend Acquire whose SET the ACL refuses: %v, want ErrRefused and not ErrNotApplied", err)
	}
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance("a"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = lk.TryAcquire(ctx, "jobs/x")
	if !errors.Is(err, leasehold.ErrRefused) || !errors.Is(err, leasehold.ErrOutcomeIndeterminate) {
		t.Fatalf("TryAcquire whose script the ACL refuses midway: %v, want ErrRefused and ErrIndeterminate", err)
	}
}

// TestPipelineRefusalAfterAWriteIsNotNotApplied: New adds its refusal hook
// to the caller's client. A pipeline whose second command the ACL refuses
// ran its first: the pipeline's error is a refusal, but not "not applied"
// (the refused command's own error is).
func TestPipelineRefusalAfterAWriteIsNotNotApplied(t *testing.T) {
	srv := testserver.Redis(t)
	b := openAs(t, srv.Addr(), "nob", "resetkeys", "~lh*", "~a*")
	ctx := context.Background()
	pipe := b.Client().Pipeline()
	set := pipe.Set(ctx, "a1", "x", 0)
	refused := pipe.Set(ctx, "b1", "x", 0)
	_, err := pipe.Exec(ctx)
	if set.Err() != nil {
		t.Fatalf("SET a1: %v", set.Err())
	}
	if !errors.Is(refused.Err(), backend.ErrRefused) || !errors.Is(refused.Err(), backend.ErrNotApplied) {
		t.Fatalf("SET b1 refused by ACL: %v, want ErrRefused and ErrNotApplied", refused.Err())
	}
	if !errors.Is(err, backend.ErrRefused) || errors.Is(err, backend.ErrNotApplied) {
		t.Fatalf("a pipeline refused after a write that ran: %v, want ErrRefused and not ErrNotApplied", err)
	}
}

// TestRefusedWaitIsNotNotApplied: with WithWaitReplicas, a user whose ACL
// allows the scripts but not WAIT has each grant run on the primary, then
// WAIT refused (NOPERM). The grant is on the server: the answer is an
// unknown outcome (ErrNotReplicated, still saying refused), never "not
// applied", which would leave the lease to expire unreleased while the
// caller believes nothing was granted. On one node, on a Sentinel client
// and on a Cluster alike.
func TestRefusedWaitIsNotNotApplied(t *testing.T) {
	ctx := context.Background()
	s := testserver.StartRedisSentinel(t)
	master, err := s.Master()
	if err != nil {
		t.Fatal(err)
	}
	single := testserver.Redis(t)
	rc := testserver.StartRedisCluster(t)
	addrs := []string{master, single.Addr()}
	for _, n := range rc.Nodes {
		addrs = append(addrs, n.Addr())
	}
	for _, addr := range addrs {
		if err := client(t, addr).Do(ctx, "acl", "setuser", "nowait", "on", ">pw", "~*", "&*", "+@all", "-wait").Err(); err != nil {
			t.Fatal(err)
		}
	}
	clients := map[string]goredis.UniversalClient{
		// A Cluster's WAIT goes through a node's own client, which the
		// refusal hook on the Cluster client does not see.
		"cluster": goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: rc.Addrs(), Username: "nowait", Password: "pw", ContextTimeoutEnabled: true}),
		"sentinel": goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: testserver.RedisSentinelMaster,
			SentinelAddrs: s.SentinelAddrs(), Username: "nowait", Password: "pw", ContextTimeoutEnabled: true}),
		"one node": goredis.NewClient(&goredis.Options{Addr: single.Addr(), Username: "nowait", Password: "pw", ContextTimeoutEnabled: true}),
	}
	for name, c := range clients {
		t.Cleanup(func() { c.Close() })
		b, err := redis.New(c, redis.WithPrefix("w:"), redis.WithWaitReplicas(1, 200*time.Millisecond))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Cleanup(func() { b.Close() })
		_, err = b.Acquire(ctx, "k", backend.Owner{Instance: "a", Nonce: backend.NewNonce()}, time.Minute)
		v, _ := c.Get(ctx, "w:lease:{k}").Result()
		if v == "" {
			t.Fatalf("%s: no grant on the primary (%v): the scenario needs the script to run", name, err)
		}
		if errors.Is(err, backend.ErrNotApplied) || !errors.Is(err, redis.ErrNotReplicated) || !errors.Is(err, backend.ErrRefused) {
			t.Errorf("%s: acquire whose grant ran and whose WAIT was refused: %v; want ErrNotReplicated and ErrRefused, not ErrNotApplied", name, err)
		}
	}
}
