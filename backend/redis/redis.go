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
//
// The hash tag {K} keeps a lease and its counter in one Cluster slot, so the
// acquire script can INCR the counter atomically with the grant. The ledger's
// scripts touch several of its keys at once (per-job history, a global index
// by scheduled time, a global index of finished runs for Prune), so every
// ledger key carries the one tag {ledger}: in a Cluster the whole ledger
// lives on one shard. Ledger traffic is one claim per occurrence, far below
// what one shard serves.
//
// # What the guarantees depend on
//
// Capabilities are computed from the server's live configuration when the
// backend is created (and again by Refresh), never asserted:
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
// non-Cluster deployment, the backend also listens to them; they fire when
// Redis actually reaps the key, which can lag the TTL, so the timer stays.
//
// # Group commit
//
// On a single node or a Sentinel-managed primary (*goredis.Client) the
// script calls go through internal/redispipe: while calls are in flight,
// the next ones queue, and a few lanes send each batch as one pipeline of
// EVALSHA calls and read the replies themselves, so a burst of n requests
// costs about n/256 round trips and a caller whose context ends does not
// make go-redis close a pooled connection. A request still queued when its
// context ends reports backend.ErrNotApplied (never sent); one already in
// a batch reports an unknown outcome. The holder's deadline still counts
// from before the call (the Locker reads the clock before it calls), which
// is no later than the batch's send time. Cluster clients send each call
// on its own (no Cluster test server is available to test batching by
// hash slot).
//
// Use a client with ContextTimeoutEnabled (Open sets it): otherwise go-redis
// ignores context deadlines on reads and a renewal whose reply is delayed
// blocks until the client's ReadTimeout, although the holder's deadline
// still fires on time.
package redis

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/redact"
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
	c        goredis.UniversalClient
	prefix   string
	ledger   string // prefix + "{ledger}:"
	ownsConn bool   // Close closes c (Open created it)
	timeout  time.Duration

	caps   atomic.Pointer[backend.Capabilities]
	expEvt atomic.Bool // keyevent expired notifications are enabled
	db     int

	closed atomic.Bool
	pipe   *redispipe.Pipe // group commit of the script calls (internal/redispipe)
	ps     *notifier
	// listBudget is how many ledger records one ListRuns script reads at
	// most (≈ 11 ms of server time at 1,000; see listRunsScript).
	listBudget int
	once       sync.Once
}

var (
	_ backend.Backend  = (*Backend)(nil)
	_ backend.Notifier = (*Backend)(nil)
)

// Option configures New and Open.
type Option func(*config)

type config struct {
	prefix  string
	timeout time.Duration
}

// WithPrefix sets the key prefix (default "leasehold:"). Two backends with
// different prefixes on one server share nothing. A prefix may not contain
// braces (they would change the keys' Cluster hash slot).
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithProbeTimeout bounds the configuration probe New runs (default 5 s).
func WithProbeTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

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
		o(&cfg)
	}
	if strings.ContainsAny(cfg.prefix, "{}") {
		return nil, fmt.Errorf("%w: prefix %q contains a brace", backend.ErrInvalid, cfg.prefix)
	}
	if err := backend.CheckKey("prefix", cfg.prefix+"x"); err != nil {
		return nil, err
	}
	b := &Backend{c: client, prefix: cfg.prefix, ledger: cfg.prefix + "{ledger}:", timeout: cfg.timeout}
	if c, ok := client.(*goredis.Client); ok {
		b.db = c.Options().DB
	}
	client.AddHook(refusalHook{}) // permission refusals match backend.ErrRefused (refused.go)
	b.pipe = redispipe.New(client)
	b.listBudget = 1000
	b.ps = newNotifier(b)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	if err := b.Refresh(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// Open connects to the server named by rawURL and returns a backend that
// owns the connection:
//
//	redis://[user:password@]host:port[/db][?prefix=p&…]
//	rediss://…  (TLS)
//
// Every query parameter go-redis's ParseURL knows (dial_timeout, pool_size,
// …) is accepted; prefix sets the key prefix. Errors never show the
// password.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: backend url: %s", backend.ErrInvalid, redact.ParseReason(err))
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, fmt.Errorf("%w: backend url %q: scheme %q is not redis or rediss", backend.ErrInvalid, u.Redacted(), u.Scheme)
	}
	q := u.Query()
	if q.Has("prefix") {
		opts = append([]Option{WithPrefix(q.Get("prefix"))}, opts...)
		q.Del("prefix")
		u.RawQuery = q.Encode()
	}
	o, err := goredis.ParseURL(u.String())
	if err != nil {
		return nil, fmt.Errorf("%w: backend url %q: %s", backend.ErrInvalid, u.Redacted(), strings.ReplaceAll(err.Error(), rawURL, u.Redacted()))
	}
	if o.TLSConfig != nil && o.TLSConfig.MinVersion < tls.VersionTLS12 {
		o.TLSConfig.MinVersion = tls.VersionTLS12
	}
	o.ContextTimeoutEnabled = true
	c := goredis.NewClient(o)
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis at %s: %w", u.Redacted(), err)
	}
	b, err := New(c, opts...)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("redis at %s: %w", u.Redacted(), err)
	}
	b.ownsConn = true
	return b, nil
}

// Client returns the go-redis client the backend uses.
func (b *Backend) Client() goredis.UniversalClient { return b.c }

// Prefix returns the key prefix.
func (b *Backend) Prefix() string { return b.prefix }

// Capabilities reports what the server's configuration allows, as read by
// New or the latest Refresh.
func (b *Backend) Capabilities() backend.Capabilities { return *b.caps.Load() }

// Close stops push events and, if Open created the connection, closes it.
// Leases are not released. Later calls fail with ErrClosed.
func (b *Backend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.ps.close()
	b.pipe.Close()
	if b.ownsConn {
		return b.c.Close()
	}
	return nil
}

func (b *Backend) check() error {
	if b.closed.Load() {
		return backend.ErrClosed
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
