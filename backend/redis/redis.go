// Package redis is the leasehold backend on one Redis deployment (a single
// node, a Sentinel-managed primary or a Cluster), through go-redis v9.
//
// Every operation that changes state is one Lua script, so acquire, renew
// and release each take one round trip (or a share of one, see Group
// commit) and are atomic on the server. The
// scripts are loaded once per server (EVALSHA, falling back to EVAL on
// NOSCRIPT). Lease expiry is judged by Redis itself (SET … PX); the owner
// (instance + nonce) and the fencing token are compared inside the script.
//
// Keys, for the default prefix "leasehold:" and a lease key K:
//
//	leasehold:lease:{K}     the lease: "token:nonce:instance", with a PX expiry
//	leasehold:token:{K}     the fencing counter (INCR); no TTL, never deleted
//	leasehold:released:{K}  the pub/sub channel a release publishes on
//	leasehold:{ledger}:…    the run ledger (all in one hash slot)
//	leasehold:{records}:…   the record store (all in one other hash slot)
//
// The hash tag {K} keeps a lease and its counter in one Cluster slot, so the
// acquire script can INCR the counter atomically with the grant, and
// spreads the keys over the Cluster's nodes. The ledger's
// scripts touch several of its keys at once (per-job history, a global index
// by scheduled time, a global index of finished runs for Prune), so every
// ledger key carries the one tag {ledger}: in a Cluster the whole ledger
// lives on one shard. That is a measured choice (BenchmarkClusterLedger,
// docs/benchmarks.md): on a 2-core host one shard took about 22,000 claims
// of distinct occurrences per second, as many as the three shards took
// lease acquire+release pairs (about 18,000 per second; the client's CPU,
// not the shard, is the limit), while a ledger sees one claim per
// occurrence of a job. One slot per job would split the global indexes
// that ListRuns and Prune read atomically into a scatter over every node,
// for no throughput a schedule needs.
//
// # Records
//
// The record store (backend.Records: CreateRecord, ListRecords,
// DeleteRecord, PruneRecords) keeps its keys apart from the ledger's,
// under the one tag {records}, so that each call is one script on one
// shard; metadata is low-volume. A record is a hash
// {records}:r:<seq>:<name>; each name has a sorted set {records}:s:<name>
// of its seqs, and records with an Expires are in the index
// {records}:exp, scored by their expiry in milliseconds, which
// PruneRecords reads from the front. Seqs are stored as 19 zero-padded
// digits and listed by ZREVRANGEBYLEX, so that every int64 keeps its exact
// order (Lua numbers and sorted-set scores are doubles). The record
// scripts go through the group commit like the ledger's, with the same
// answers to an ended context, a redirection and WithWaitReplicas (see
// scripts.go for the layout).
//
// # What the guarantees depend on
//
// Capabilities are computed from the server's live configuration when the
// backend is created, never asserted. That configuration can change while
// the backend is open (CONFIG SET appendonly no): RefreshCapabilities (or
// Refresh) reads it again, and the declaration says when it was read
// (ReadAt). "leasehold doctor" and the daemon refresh before they state a
// guarantee, and the daemon again every minute. A configuration that cannot
// be read is no guarantee: a refused CONFIG GET or INFO, or a refresh that
// gets no answer, declares SafeFencing and DurableFencing false.
//
//   - SafeFencing needs maxmemory-policy noeviction on every node: an evicting
//     policy may drop a token counter, and the next INCR would start again
//     from 1. Under any other policy, or when CONFIG GET is not allowed, the
//     backend still works but declares SafeFencing false.
//   - DurableFencing needs, on top, appendonly yes with appendfsync always on
//     a primary with no replicas. With RDB snapshots or appendfsync everysec
//     a crash loses the last writes, so after a restart a counter can go
//     backwards and a lease thought held can be granted again. With replicas
//     (Sentinel or Cluster failover) replication is asynchronous: a replica
//     promoted after missing the last writes can grant a second lease and
//     repeat tokens. Neither is a bug this package can fix; it is declared.
//   - Expiry is judged by the Redis server's clock. A server whose clock is
//     stepped can expire leases early or late; run NTP in slew mode.
//
// # Push events
//
// The release script PUBLISHes on the key's channel; Wait subscribes (one
// pattern subscription per Backend, shared by all waiters) and wakes waiters
// at once. Expiry is not a release: a waiter also gets a timer at the
// holder's remaining TTL as reported by PTTL. When the server's
// notify-keyspace-events includes expired key events (E and x, or A) on a
// non-Cluster deployment when New reads its configuration, the backend also
// listens to them; they fire when Redis actually reaps the key, which can
// lag the TTL, so the timer stays.
//
// # Group commit
//
// The script calls go through internal/redispipe: while calls are in
// flight, the next ones queue, and a few lanes send each batch as one
// pipeline of EVALSHA calls and read the replies themselves, so a burst of
// n requests costs about n/256 round trips and a caller whose context ends
// does not make go-redis close a pooled connection. A request still queued
// when its context ends reports backend.ErrNotApplied (never sent); one
// already in a batch reports an unknown outcome. The holder's deadline
// still counts from before the call (the Locker reads the clock before it
// calls), which is no later than the batch's send time. On a Cluster the
// calls are grouped by the primary that serves their slot, one queue per
// node; a node that answers MOVED, ASK, TRYAGAIN or CLUSTERDOWN ran
// nothing, and the call is reported not applied (never resent blindly;
// the Locker retries it on the reloaded slot map).
//
// # Failover
//
// Sentinel (a failover client, redis://…?master_name=…) and Cluster
// deployments keep replicas, and Redis replicates asynchronously: a grant
// the primary acknowledged can be missing on the replica promoted when the
// primary dies, which then grants the key again, with a repeated or lower
// token. DurableFencing is therefore never declared while a primary has
// replicas, and Explain says why. WithWaitReplicas (wait_replicas=N) ends
// each batch with WAIT N, so a grant is reported only once N replicas have
// it; a grant not confirmed in time fails with ErrNotReplicated (outcome
// unknown). With N equal to the replica count, a failover keeps every
// reported grant (TestWaitReplicasKeepsGrantsAcrossFailover); set
// min-replicas-to-write on the primaries so that they refuse writes they
// cannot replicate.
//
// Use a client with ContextTimeoutEnabled (Open sets it): otherwise go-redis
// ignores context deadlines on reads and a renewal whose reply is delayed
// blocks until the client's ReadTimeout, although the holder's deadline
// still fires on time.
package redis

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/closegate"
	"github.com/leasehold/leasehold/internal/declared"
	"github.com/leasehold/leasehold/internal/guard"
	"github.com/leasehold/leasehold/internal/redispipe"
)

// MinTTL is the shortest lease the backend grants: PX is in milliseconds.
const MinTTL = time.Millisecond

// TTLGranularity: granted TTLs are rounded up to whole milliseconds.
const TTLGranularity = time.Millisecond

// DefaultPrefix is the key prefix when none is given.
const DefaultPrefix = "leasehold:"

// Backend is the Redis backend. Create it with New or Open.
type Backend struct {
	g        guard.Guard // checks, closed state (gate), failure names: "redis"
	c        goredis.UniversalClient
	prefix   string
	ledger   string // prefix + "{ledger}:"
	records  string // prefix + "{records}:"
	ownsConn bool   // Close closes c (Open created it)
	timeout  time.Duration

	caps   declared.Latest // of two refreshes, the one begun last
	expEvt atomic.Bool     // keyevent expired notifications are enabled
	db     int

	gate closegate.Gate
	pipe *redispipe.Pipe // group commit of the script calls (internal/redispipe)
	ps   *notifier
	// listBudget is how many ledger records one ListRuns script reads at
	// most (≈ 11 ms of server time at 1,000; see listRunsScript).
	listBudget int
	once       sync.Once
	wait       waitConfig // WithWaitReplicas (replicas.go)
}

var (
	_ backend.Backend  = (*Backend)(nil)
	_ backend.Notifier = (*Backend)(nil)
)

// Option configures New and Open. Each validates its argument: New returns
// the first error, wrapping backend.ErrInvalid and naming the option and
// the value.
type Option func(*config) error

type config struct {
	prefix  string
	timeout time.Duration
	wait    waitConfig // replicas.go
}

// WithPrefix sets the key prefix (default "leasehold:"). Two backends with
// different prefixes on one server share nothing. A prefix may not contain
// braces (they would change the keys' Cluster hash slot).
func WithPrefix(p string) Option {
	return func(c *config) error {
		if err := CheckPrefix(p); err != nil {
			return err
		}
		c.prefix = p
		return nil
	}
}

// CheckPrefix validates a key prefix as WithPrefix takes it (Redlock's
// WithPrefix too): no braces, and a valid key once a name follows it.
func CheckPrefix(p string) error {
	if strings.ContainsAny(p, "{}") {
		return fmt.Errorf("%w: WithPrefix(%q): contains a brace", backend.ErrInvalid, p)
	}
	if err := backend.CheckKey("prefix", p+"x"); err != nil {
		return fmt.Errorf("WithPrefix(%q): %w", p, err)
	}
	return nil
}

// WithProbeTimeout bounds the configuration probe New runs (default 5 s);
// it must be positive.
func WithProbeTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithProbeTimeout(%v): not positive", backend.ErrInvalid, d)
		}
		c.timeout = d
		return nil
	}
}

// New returns a backend over client, which the caller keeps owning (Close
// does not close it). It reads the server's configuration to compute
// Capabilities and fails if the server cannot be reached. It adds a hook
// to client that makes the server's permission refusals (NOPERM, NOAUTH,
// WRONGPASS, a script's refused command) match backend.ErrRefused; their
// messages stay as they are.
func New(client goredis.UniversalClient, opts ...Option) (*Backend, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redis client is nil", backend.ErrInvalid)
	}
	cfg := config{prefix: DefaultPrefix, timeout: 5 * time.Second}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil redis option", backend.ErrInvalid)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if strings.ContainsAny(cfg.prefix, "{}") {
		return nil, fmt.Errorf("%w: prefix %q contains a brace", backend.ErrInvalid, cfg.prefix)
	}
	if err := backend.CheckKey("prefix", cfg.prefix+"x"); err != nil {
		return nil, err
	}
	b := &Backend{c: client, prefix: cfg.prefix, ledger: cfg.prefix + "{ledger}:",
		records: cfg.prefix + "{records}:", timeout: cfg.timeout}
	b.g = guard.Guard{Name: "redis", MinTTL: MinTTL, Closed: b.gate.Check}
	if c, ok := client.(*goredis.Client); ok {
		b.db = c.Options().DB
	}
	client.AddHook(refusalHook{}) // permission refusals match backend.ErrRefused (refused.go)
	pipe, err := redispipe.NewWith(client, redispipe.Options{
		WaitReplicas: cfg.wait.replicas, WaitTimeout: cfg.wait.timeout,
		MapError: refusal, // a Cluster's node replies miss the hook above
	})
	if err != nil {
		return nil, err
	}
	b.pipe, b.wait = pipe, cfg.wait
	b.listBudget = 1000
	b.ps = newNotifier(b)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	events, err := b.refresh(ctx)
	if err != nil {
		return nil, err
	}
	// Whether to listen for expired-key events is decided here, once: the
	// subscription is made once, and the notifier withdraws it when the
	// user's ACL refuses it (notify.go).
	b.expEvt.Store(events)
	return b, nil
}

// Open connects to the deployment named by rawURL and returns a backend
// that owns the connection. Three forms, in go-redis's own syntax (see
// ParseURL in url.go for every rule):
//
//	redis://[user:password@]host:port[/db][?prefix=p&…]            one node
//	redis://[user:password@]h1:p1?addr=h2:p2&addr=h3:p3[&…]       a Cluster (seeds)
//	redis://[suser:spassword@]s1:p1?master_name=m&addr=s2:p2&password=pw[&…]
//	                                                                Sentinel
//	rediss://…  (TLS, any form)
//
// Every query parameter go-redis knows for the form (dial_timeout,
// pool_size, …) is accepted; prefix sets the key prefix, wait_replicas
// and wait_timeout set WithWaitReplicas. Errors never show a password.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	p, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	c := p.NewClient()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis at %s: %w", p.Redacted, err)
	}
	b, err := New(c, append(p.Options, opts...)...)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("redis at %s: %w", p.Redacted, err)
	}
	b.ownsConn = true
	return b, nil
}

// Client returns the go-redis client the backend uses.
func (b *Backend) Client() goredis.UniversalClient { return b.c }

// Prefix returns the key prefix.
func (b *Backend) Prefix() string { return b.prefix }

// Capabilities reports what the server's configuration allows, as read by
// New or the latest RefreshCapabilities (at ReadAt).
func (b *Backend) Capabilities() backend.Capabilities { return b.caps.Load() }

// Close stops push events and, if Open created the connection, closes it.
// Leases are not released. Later calls fail with ErrClosed.
func (b *Backend) Close() error {
	if !b.gate.Shut() {
		return nil
	}
	b.ps.close()
	b.pipe.Close()
	if b.ownsConn {
		return b.c.Close()
	}
	return nil
}

func (b *Backend) leaseKey(k string) string    { return b.prefix + "lease:{" + k + "}" }
func (b *Backend) tokenKey(k string) string    { return b.prefix + "token:{" + k + "}" }
func (b *Backend) channel(k string) string     { return b.prefix + "released:{" + k + "}" }
func (b *Backend) keyOfLease(rk string) string { return rk[len(b.prefix)+len("lease:{") : len(rk)-1] }
func (b *Backend) keyOfChannel(ch string) string {
	return ch[len(b.prefix)+len("released:{") : len(ch)-1]
}

// globEscape escapes the characters Redis glob patterns treat specially.
func globEscape(s string) string {
	var sb strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			sb.WriteByte('\\')
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// ttlMS rounds a TTL up to whole milliseconds.
func ttlMS(ttl time.Duration) int64 { return int64((ttl + time.Millisecond - 1) / time.Millisecond) }
