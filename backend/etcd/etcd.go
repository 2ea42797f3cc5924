// Package etcd is the leasehold backend for etcd v3 (go.etcd.io/etcd/client/v3).
//
// # What is guaranteed
//
//   - Grant exclusion: a lock is the key <prefix>l/<key>, created by ONE Txn
//     `If(create_revision(lock) == 0) Then(get counter, put lock, put counter)
//     Else(get lock)` and attached to an etcd lease. While the lease lives
//     (by the etcd leader's clock) the key exists and no other Txn can
//     create it. etcd's Raft log makes this hold across leader changes.
//   - Fencing token = the lock key's create revision, which is the revision
//     of the granting Txn. etcd's revision is one cluster-wide counter that
//     only grows; it is in the WAL, which etcd fsyncs before acknowledging,
//     so it survives restarts, compaction and leader changes (SafeFencing and
//     DurableFencing). Tokens are per key: keys granted in one batch (see
//     Group commit) share a token. Beside each lock key the backend keeps a per-key
//     counter key <prefix>c/<key>: no lease, rewritten by every grant in the
//     same Txn (so its mod revision is the last token granted on the key)
//     and never deleted by Release, expiry or Prune. The granting Txn reads
//     it before writing and the grant is withdrawn if the new token is not
//     above it. Within one etcd keyspace that cannot happen; the check is a
//     tripwire for a token scheme other than the create revision, not a
//     protection against restoring an old snapshot or mirroring into a new
//     cluster (both rewind the counter key too): never do either under
//     live fenced resources.
//   - Lease per grant, not a shared session lease: the contract's Grant.TTL
//     promises the lease lasts TTL from the request's send time. A lease
//     shared by several locks was granted or last renewed earlier, so a new
//     lock on it could expire sooner than promised; and renewing one lock
//     would silently keep alive another whose holder gave up. So each held
//     key has a lease of its own, Renew is a keep-alive of that lease, and
//     Release deletes the key guarded by create revision and owner. A
//     released key's lease is idle and still alive: it goes to a pool, and
//     the next Acquire with the same TTL reuses it. Lock leases are granted
//     1 s longer than asked (the slack) and grants report the TTL without
//     it, so a pooled lease refreshed (granted or kept alive) within the
//     last 0.8 s needs no keep-alive: Acquire is then its Txn alone, one
//     RPC, the same as a Mutex on a shared session. An older pooled lease
//     gets a keep-alive sent in parallel with the Txn (the grant counts only
//     if it succeeded). Without a pooled lease, Acquire is LeaseGrant then
//     the Txn. Release is one Txn; for its own grants the backend knows the
//     lease and owner locally. The price of the slack: a key whose holder
//     died outlives its last renewal by up to TTL + 1 s. Keep-alives go over
//     a few long-lived streams shared by all locks of the backend (see
//     pool.go and kastream.go). What a Mutex does not pay: the counter key
//     written by every grant, and a guarded Txn to release where its Unlock
//     is a plain delete; group commit more than makes up for both at many
//     goroutines (measured in docs/benchmarks.md).
//   - Group commit (batch.go): at many goroutines etcd's CPU is the limit,
//     and every write Txn costs a Raft entry, an fsync share and (3.4) a
//     copy of the write buffer for its compares. While two acquire Txns
//     (resp. release Txns) of the backend are in flight, later ones queue;
//     when one returns, up to 32 queued ones go as ONE Txn whose Then holds
//     each request's own If/Then/Else as a nested Txn (etcd ≥ 3.3), so each
//     is decided as if alone; a batch never holds two requests on one key.
//     A request that finds a free slot is sent alone at once, as before. A
//     request whose context ends while queued gets ErrNotApplied (nothing
//     sent); once its batch is sent, its outcome is unknown as for a Txn
//     alone, and the batch Txn lasts until every member's context ended
//     or Close. A batch that etcd refuses unapplied (a member's lease gone,
//     too many operations) is re-sent member by member; any other failure
//     leaves every member's outcome unknown, never "held".
//   - TTL: etcd leases have whole-second TTLs and a server-side floor of
//     1.5 × the election timeout (2 s with etcd's defaults, 1 s with a
//     ≤ 600 ms election timeout). The requested TTL is rounded up to whole
//     seconds and the TTL etcd actually granted is returned. Expiry takes
//     effect when the leader revokes the lease (it checks every 500 ms), so
//     a key may outlive its TTL a little — never the other way round. A new
//     leader extends every lease by its TTL (etcd's rule), again the safe
//     direction.
//   - Owner identity: the lock's value is "<nonce> <instance>". A retried
//     Acquire whose earlier Txn was applied finds its own nonce and answers
//     with the same token, re-sending a keep-alive on that lease so the TTL
//     counts from the retry; the lease it granted for the retry is revoked.
//   - Push events: Wait watches the lock key from the revision of its Get + 1,
//     so a delete between the Get and the watch is not missed; a compacted
//     revision (ErrCompacted), a lost leader or a closed watch closes the
//     channel (a spurious wake-up, which the contract allows): no lost
//     wake-ups and no polling.
//   - Ledger: see ledger.go. Claim tokens are a per-job counter kept in the
//     job's key, changed only by compare-and-swap Txns; history is a key per
//     run under <prefix>r/; a runner's lease is an etcd lease on
//     <prefix>a/<job>/<instant>.
//   - Records (backend.Records): see records.go. A record is the key
//     <prefix>rec/<name>/<seq>, created first-wins by one Txn
//     `If(create_revision == 0) Then(put) Else(get)`; records that expire
//     are also indexed under <prefix>recx/<expires>/ for PruneRecords.
//
// What etcd does not give: a readable server wall clock. ClaimedAt,
// FinishedAt and the ErrTooEarly and ErrTooLate checks use this client's clock; lease
// expiry (the safety-relevant clock) is etcd's.
//
// Space: etcd keeps every revision until compaction, and a full quota
// (2 GiB by default) raises the NOSPACE alarm, which blocks every write —
// renewals included, so every lock would be lost. Prune and PruneRecords
// compact up to the revision of their last delete (disable with
// Config.NoCompact if something else owns compaction, e.g.
// --auto-compaction-retention). Compaction frees
// space inside the database file only; run `etcdctl defrag` on each member
// (one at a time: it blocks the member) to give it back to the filesystem,
// and `etcdctl alarm disarm` after a NOSPACE alarm.
package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/guard"
)

// MinTTL is the shortest TTL the backend accepts: etcd leases are whole
// seconds. The server may grant more (its floor is 1.5 × election timeout);
// the granted TTL is returned.
const MinTTL = time.Second

// TTLGranularity: granted TTLs are whole seconds.
const TTLGranularity = time.Second

// maxTxnOps bounds the operations of one Txn (etcd's default
// --max-txn-ops is 128).
const maxTxnOps = 128

// Config configures Open.
type Config struct {
	// Endpoints are the members' client addresses ("host:port" or URLs).
	Endpoints []string
	// Prefix is prepended to every key this backend writes (default
	// "leasehold/"). Two backends with different prefixes never meet.
	Prefix string
	// Username and Password authenticate to an etcd with auth enabled.
	Username, Password string
	// CAFile, CertFile and KeyFile configure TLS: a CA to verify the
	// members, and a client certificate. TLS is on when any is set.
	CAFile, CertFile, KeyFile string
	// DialTimeout bounds connecting (default 5 s).
	DialTimeout time.Duration
	// NoCompact stops Prune and PruneRecords from compacting the revisions
	// they deleted.
	NoCompact bool
}

// Backend is the etcd backend. It is safe for concurrent use.
type Backend struct {
	g      guard.Guard // checks, closed state (check), names failures
	c      *clientv3.Client
	own    bool // Close closes c
	prefix string
	cfg    Config

	pool *leasePool
	ka   []*kaStream // keep-alive streams; a lease always uses the same one

	acq, rel *batcher // group commit of the acquire and release Txns (batch.go)

	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed by Close: ends watches
}

var (
	_ backend.Backend  = (*Backend)(nil)
	_ backend.Notifier = (*Backend)(nil)
	_ backend.Records  = (*Backend)(nil)
)

// Open connects to etcd as described by rawURL:
//
//	etcd://[user:password@]host1:2379,host2:2379/prefix?cacert=F&cert=F&key=F
//
// The path (without its leading slash) is the key prefix; a trailing slash
// is added. cacert/cert/key turn TLS on. Errors never contain the password.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	cfg, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	return OpenConfig(ctx, cfg)
}

// ParseURL parses the URL form Open accepts into a Config.
func ParseURL(rawURL string) (Config, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error quotes the URL, password included: do not wrap it.
		return Config{}, fmt.Errorf("%w: etcd url is not a valid URL", backend.ErrInvalid)
	}
	if u.Scheme != "etcd" {
		return Config{}, fmt.Errorf("%w: etcd url %q: scheme %q is not etcd", backend.ErrInvalid, u.Redacted(), u.Scheme)
	}
	if u.Host == "" {
		return Config{}, fmt.Errorf("%w: etcd url %q has no host", backend.ErrInvalid, u.Redacted())
	}
	cfg := Config{Prefix: strings.TrimPrefix(u.Path, "/")}
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return Config{}, fmt.Errorf("%w: etcd url %q has an empty host", backend.ErrInvalid, u.Redacted())
		}
		cfg.Endpoints = append(cfg.Endpoints, h)
	}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}
	q := u.Query()
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = q.Get("cacert"), q.Get("cert"), q.Get("key")
	for k := range q {
		switch k {
		case "cacert", "cert", "key":
		default:
			return Config{}, fmt.Errorf("%w: etcd url %q: unknown parameter %q", backend.ErrInvalid, u.Redacted(), k)
		}
	}
	return cfg, nil
}

// OpenConfig connects to etcd as cfg says. The backend owns the client and
// closes it in Close.
func OpenConfig(ctx context.Context, cfg Config) (*Backend, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: etcd endpoints are empty", backend.ErrInvalid)
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	cc := clientv3.Config{
		Endpoints: cfg.Endpoints, Username: cfg.Username, Password: cfg.Password,
		DialTimeout: cfg.DialTimeout, Context: context.WithoutCancel(ctx),
		DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 5 * time.Second,
		Logger: nopLogger(),
	}
	if cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" {
		tc, err := tlsConfig(cfg)
		if err != nil {
			return nil, err
		}
		cc.TLS = tc
	}
	c, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("etcd: connect to %v: %w", cfg.Endpoints, err)
	}
	b, err := newBackend(c, cfg)
	if err != nil {
		c.Close()
		return nil, err
	}
	b.own = true
	// Fail early on a wrong address or credentials.
	pctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if _, err := c.Get(pctx, b.prefix+"probe"); err != nil {
		c.Close()
		return nil, fmt.Errorf("etcd: probe %v: %w", cfg.Endpoints, err)
	}
	return b, nil
}

// Option configures New and Open (over what the URL or Config says). Each
// validates its argument: New and Open return the first error, wrapping
// backend.ErrInvalid and naming the option and the value.
type Option func(*Config) error

// WithPrefix sets the key prefix (Config.Prefix; default, and when empty,
// "leasehold/"; a trailing slash is added).
func WithPrefix(p string) Option {
	return func(c *Config) error {
		if err := backend.CheckKey("prefix", strings.TrimSuffix(p, "/")+"/"); err != nil && p != "" {
			return fmt.Errorf("WithPrefix(%q): %w", p, err)
		}
		c.Prefix = p
		return nil
	}
}

// WithNoCompact stops Prune and PruneRecords from compacting the revisions
// they deleted (Config.NoCompact).
func WithNoCompact(on bool) Option { return func(c *Config) error { c.NoCompact = on; return nil } }

// apply applies opts to cfg; a nil one is refused.
func (cfg *Config) apply(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return fmt.Errorf("%w: nil etcd option", backend.ErrInvalid)
		}
		if err := o(cfg); err != nil {
			return err
		}
	}
	return nil
}

// New returns a backend over an existing client, which the caller keeps
// and closes.
func New(c *clientv3.Client, opts ...Option) (*Backend, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: etcd client is nil", backend.ErrInvalid)
	}
	var cfg Config
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	return newBackend(c, cfg)
}

func newBackend(c *clientv3.Client, cfg Config) (*Backend, error) {
	p := cfg.Prefix
	if p == "" {
		p = "leasehold/"
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	if err := backend.CheckKey("prefix", p); err != nil {
		return nil, err
	}
	cfg.Password = "" // not kept beyond the client
	b := &Backend{
		c: c, prefix: p, cfg: cfg, pool: newLeasePool(), ka: newKAStreams(c), done: make(chan struct{}),
		acq: newBatcher(c, "acquire"), rel: newBatcher(c, "release"),
	}
	b.g = guard.Guard{Name: "etcd", MinTTL: MinTTL, Closed: b.check}
	return b, nil
}

func tlsConfig(cfg Config) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: etcd cacert %q: %v", backend.ErrInvalid, cfg.CAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: etcd cacert %q holds no PEM certificate", backend.ErrInvalid, cfg.CAFile)
		}
		tc.RootCAs = pool
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, fmt.Errorf("%w: etcd cert %q and key %q must be given together", backend.ErrInvalid, cfg.CertFile, cfg.KeyFile)
	}
	if cfg.CertFile != "" {
		crt, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: etcd cert %q / key %q: %v", backend.ErrInvalid, cfg.CertFile, cfg.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{crt}
	}
	return tc, nil
}

// Prefix is the key prefix this backend writes under.
func (b *Backend) Prefix() string { return b.prefix }

// Client is the underlying etcd client (for fenced writes: a resource
// stored in etcd can guard a write with
// clientv3.Compare(clientv3.CreateRevision(b.LockKey(k)), "=", token)).
func (b *Backend) Client() *clientv3.Client { return b.c }

// LockKey is the etcd key that holds the lease on key.
func (b *Backend) LockKey(key string) string { return b.prefix + "l/" + key }

func (b *Backend) counterKey(key string) string { return b.prefix + "c/" + key }

// Capabilities: etcd's lease clock, revision-based tokens on a fsynced WAL,
// watches.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Name: "etcd", ServerClock: true, SafeFencing: true, DurableFencing: true,
		PushEvents: true, MultiProcess: true, MinTTL: MinTTL, TTLGranularity: TTLGranularity,
	}
}

// Close ends the backend's watches and, if Open made the client, closes it.
// Leases are not released: they expire by their TTL.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.done)
	b.mu.Unlock()
	// Queued acquires and releases were never sent: they get ErrClosed. A
	// batch in flight is cancelled (its members' outcome is unknown).
	b.acq.close()
	b.rel.close()
	// Idle pooled leases hold no key; revoke them rather than let them
	// linger for their TTL.
	var wg sync.WaitGroup
	for _, id := range b.pool.drain() {
		wg.Add(1)
		go func() { defer wg.Done(); b.revoke(id) }()
	}
	wg.Wait()
	for _, k := range b.ka {
		k.close()
	}
	if b.own {
		return b.c.Close()
	}
	return nil
}

func (b *Backend) check() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.ErrClosed
	}
	return nil
}

// fail turns a client error of a step (what the Guard hands a call to)
// into one callers can classify: the error (not a sentinel unless
// ErrNotApplied: the outcome is unknown), after what was being done if the
// step did more than one thing (what; "" for the call itself, which the
// Guard names). A request cut off by Close was sent, so it may have been
// applied: it is not ErrClosed (which says nothing happened) but an
// unknown outcome, so that the Locker reports ErrIndeterminate; requests
// made after Close get ErrClosed from the Guard before anything is sent.
func (b *Backend) fail(err error, what string) error {
	if err == nil {
		return nil
	}
	if what != "" {
		what += ": "
	}
	if b.check() != nil && !errors.Is(err, backend.ErrClosed) {
		return fmt.Errorf("%sthe backend was closed with the request in flight, its outcome unknown: %w", what, err)
	}
	if what == "" {
		return err
	}
	return fmt.Errorf("%s%w", what, err)
}

// wrap is fail for a call the Guard does not name: "etcd: <what>: …".
func (b *Backend) wrap(err error, what string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("etcd: %w", b.fail(err, what))
}

// keepAlive renews lease id once over the backend's keep-alive stream and
// returns the lease's TTL; rpctypes.ErrLeaseNotFound if it is gone.
func (b *Backend) keepAlive(ctx context.Context, id clientv3.LeaseID) (time.Duration, error) {
	ttl, err := b.kaFor(id).keepAlive(ctx, id)
	return time.Duration(ttl) * time.Second, err
}

// kaFor is the keep-alive stream of lease id. Several streams, because an
// etcd member answers one stream's requests one at a time, and a follower
// forwards each renewal to the leader.
func (b *Backend) kaFor(id clientv3.LeaseID) *kaStream {
	return b.ka[uint64(id)%uint64(len(b.ka))]
}

// ttlSeconds rounds ttl up to whole seconds.
func ttlSeconds(ttl time.Duration) int64 {
	return int64((ttl + time.Second - 1) / time.Second)
}
