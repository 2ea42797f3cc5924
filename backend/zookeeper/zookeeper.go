// Package zookeeper is the leasehold backend for Apache ZooKeeper
// (github.com/go-zookeeper/zk).
//
// # What a lease is on ZooKeeper
//
// ZooKeeper has no per-node TTL precise enough for leases; its only
// server-side expiry is the session. A lock on key K is an ephemeral
// sequential node <prefix>/locks/<K>/_c_<nonce>-lock-<seq> of this backend's
// session (the standard recipe, with Curator-style protected names whose
// GUID is the grant's owner nonce). The node with the lowest sequence number
// holds the lock. Acquire is the contract's non-blocking try: it creates its
// node, lists the queue, and if a predecessor exists it deletes its own
// node and returns a *HeldError naming the holder (the lowest node).
// AcquireQueued (backend.Queue, which the Locker uses for a blocking
// Acquire) is the recipe's waiter: its node stays in line and watches only
// its immediate predecessor, so a release hands the key over with the
// holder's delete, one watch event and one getChildren — no write by the
// waiter on the hand-over path (unless a cleanup of this backend's may have
// been after its node: see Guarantees), and no herd. A waiter that gives up deletes
// its node; if that cannot be confirmed, it keeps trying in the background
// until the node is gone, kept by a grant to a retry with the same owner,
// or the session ends.
//
// The node disappears — the lease ends — at the earliest of:
//
//   - Release (a delete guarded by the node's czxid and owner nonce);
//   - session expiry: the server heard nothing from this backend's session
//     (the client pings every third of the timeout) for the negotiated
//     session timeout — the holder's process died or was cut off. This is
//     judged by the ZooKeeper server's clock;
//   - TTL without a successful Renew: the backend that created the node
//     deletes it when TTL has passed since the send time of its last
//     acquire/renew — an Acquire answered "yours" renews too (ZooKeeper
//     would keep a live but silent holder's node forever). A failed delete
//     (a connection lost across the TTL instant) is retried until the node
//     is gone or the session ended: a client that reconnects to its session
//     must not keep the node alive. This is judged by the holder's own
//     clock — the clock its deadline is on — so Capabilities().ServerClock
//     is false.
//   - Close: closing the session has the server delete every ephemeral
//     node of it at once. This is also the cleanup of a request in flight
//     when Close came, whose outcome is unknown: its error does not wrap
//     ErrClosed (the Locker reports ErrIndeterminate), and the node it may
//     have created goes with the session.
//
// The granted TTL is min(requested TTL, negotiated session timeout): the
// node lives at least that long from the request's send time by both
// rules. The session timeout is negotiated by the server within
// [minSessionTimeout, maxSessionTimeout] (2–20 × tickTime by default); the
// backend reads the value the server granted from the connect handshake
// and uses it. Set Config.SessionTimeout ≥ the lock TTL you use.
//
// # Guarantees
//
//   - Grant exclusion: only the lowest node of a key's queue is granted,
//     and a node is granted only if it is the lowest when listed after its
//     creation; nodes are ordered by the server's sequence counter.
//   - Fencing token = the lock node's czxid, the zxid of the transaction
//     that created it: (epoch << 32 | counter), which only grows across
//     leader elections and restarts. A granted node was created after every
//     earlier holder's node, so tokens strictly increase per key. ZooKeeper
//     fsyncs its transaction log before acknowledging (forceSync=yes, the
//     default), so tokens survive server restarts (DurableFencing).
//   - Retries: a create whose reply was lost is found by its protected name
//     (the owner nonce) and owned by the retry — never orphaned. The
//     backend remembers the owner nonces whose create (or withdrawal) had
//     an unknown outcome and lists the queue before creating only for
//     those; a retried Acquire of a grant this backend made is answered
//     from its local record after a write to the node that renews it (a
//     write goes through the leader, so on an ensemble a follower cut off
//     from the leader cannot answer from state older than the retry; the
//     other listings after an unknown outcome sync first for the same
//     reason). A grant is made only of a node that exists once the grant
//     has armed its timer: when something else of this backend's may have
//     been after it (an earlier attempt's timer, or a cleanup that finds an
//     owner's nodes by name: the search below, a waiter's withdrawal), a
//     write sent after the arm confirms it (see Acquire); and a withdrawal
//     leaves a node a grant keeps. No node this backend may
//     have created is left untimed: when a try Acquire's outcome is
//     unknown, a background search finds the owner's nodes by protected
//     name and times each one for deletion at the TTL from the first
//     unknown request's send time (a waiter nobody waits on would otherwise
//     become a holder that nobody renews or releases). A claim whose
//     outcome is unknown times its runner's lease node the same way, so its
//     retry is answered "yours" and a silent runner's lease ends.
//   - Push events: Wait sets a watch on the holder's node (the predecessor
//     of anyone who would acquire next); its deletion — release, expiry of
//     the holder's session or TTL — fires it. Any other watch event
//     (disconnect, session expiry) also closes the channel, which the
//     contract allows as a spurious wake-up.
//   - Ledger (ledger.go): hierarchical, so no parent node has unbounded
//     children (jute.maxbuffer limits a getChildren reply to 1 MB):
//     <prefix>/jobs/<job> holds the job's claim counter and high-water mark,
//     runs live under <prefix>/jobs/<job>/runs/<hour>/<instant>, the
//     runner's lease is an ephemeral <prefix>/jobs/<job>/alive/<instant>
//     with the same TTL rule as locks, and <prefix>/fin/<hour>/ indexes
//     finished runs for Prune. Claims are atomic multi-ops guarded by the
//     job node's version.
//   - Records (records.go), apart from the ledger: a record is
//     <prefix>/records/<name>/<seq> (seq 19-digit zero-padded) with its
//     creator's mark <prefix>/records/<name>/<seq>/<nonce>, and one that
//     expires has an entry <prefix>/records-exp/<hour>/<expires ms>-<name>-<seq>
//     for PruneRecords; each is created and deleted with its mark and entry
//     in one multi-op, so a create is first-wins by the record node's
//     existence and a delete by another owner's record's mark fails.
//   - go-zookeeper takes no context: a request is bounded by the session's
//     receive timeout (2/3 of the session timeout), not by ctx; ctx is
//     checked before each call.
//   - ACLs: with Config.Username, the session authenticates with the digest
//     scheme and every node is created with a digest ACL for that user only.
//
// # Constructors
//
// Open (a zk:// URL) and New (a server list) take Options, OpenConfig a
// Config; each makes a session the backend owns, and Close closes it.
// There is no New over a *zk.Conn the caller keeps, unlike the other
// backends: only closing the backend's own session ends at once every node
// it created or may have created, and the granted session timeout that caps
// TTLs is reported only to the logger the connection was made with. To
// shape the connection (a dialer, a host provider), pass WithConnOptions.
package zookeeper

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/guard"
)

// MinTTL is the shortest TTL the backend accepts.
const MinTTL = 100 * time.Millisecond

// DefaultSessionTimeout is the session timeout requested when
// Config.SessionTimeout is zero.
const DefaultSessionTimeout = 15 * time.Second

// Config configures OpenConfig; Open and New set it from a URL or their
// arguments and Options. Zero durations and an empty Prefix take the
// defaults; negative durations and prefixes with empty, "." or ".."
// segments are refused.
type Config struct {
	// Servers are "host:port" addresses of the ensemble.
	Servers []string
	// Prefix is the root path of every node this backend writes (default
	// "/leasehold").
	Prefix string
	// SessionTimeout is the session timeout requested; the server may grant
	// another (see Backend.SessionTimeout).
	SessionTimeout time.Duration
	// Username and Password enable digest authentication and digest ACLs.
	Username, Password string
	// ConnectTimeout bounds establishing the session (default 10 s).
	ConnectTimeout time.Duration
	// ConnOptions are go-zookeeper connection options (see
	// WithConnOptions).
	ConnOptions []func(*zk.Conn)

	hooks hooks // test seams; none outside the package's tests
}

// ParseURL parses "zk://[user:password@]host1:2181,host2:2181/prefix
// [?session_timeout=10s]" into a Config. Errors never contain the password.
func ParseURL(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("%w: zookeeper url is not a valid URL", backend.ErrInvalid)
	}
	if u.Scheme != "zk" && u.Scheme != "zookeeper" {
		return Config{}, fmt.Errorf("%w: zookeeper url %q: scheme %q is not zk", backend.ErrInvalid, u.Redacted(), u.Scheme)
	}
	if u.Host == "" {
		return Config{}, fmt.Errorf("%w: zookeeper url %q has no host", backend.ErrInvalid, u.Redacted())
	}
	cfg := Config{Servers: strings.Split(u.Host, ","), Prefix: strings.TrimSuffix(u.Path, "/")} // zk://h/ is the default prefix
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}
	for k, v := range u.Query() {
		switch k {
		case "session_timeout":
			d, err := time.ParseDuration(v[0])
			if err != nil || d <= 0 {
				return Config{}, fmt.Errorf("%w: zookeeper url %q: session_timeout %q is not a positive duration", backend.ErrInvalid, u.Redacted(), v[0])
			}
			cfg.SessionTimeout = d
		default:
			return Config{}, fmt.Errorf("%w: zookeeper url %q: unknown parameter %q", backend.ErrInvalid, u.Redacted(), k)
		}
	}
	return cfg, nil
}

// Backend is the ZooKeeper backend; it owns one session, whichever of Open,
// OpenConfig and New made it, and Close closes it. It is safe for
// concurrent use.
type Backend struct {
	g      guard.Guard // checks, closed state (check), names failures
	conn   *zk.Conn
	prefix string
	acl    []zk.ACL

	mu          sync.Mutex
	closed      bool
	negotiated  time.Duration
	lastConnLog string                            // the client's last log line but the handshake's (handshakeLogger)
	timers      map[timerKey]*time.Timer          // ephemeral node → TTL deletion
	grants      map[grantRef]grantRec             // lock grants this backend keeps alive
	grantAt     map[string]grantRef               // the same, by node path
	grantBy     map[backend.Nonce]grantRef        // the same, by owner nonce
	unsureOf    map[backend.Nonce]unsureRec       // owners whose node may exist unknown to them
	settling    map[backend.Nonce]bool            // owners whose nodes settle looks for
	abandoned   map[backend.Nonce][]chan struct{} // calls whose caller gave up, still running (bounded)
	byName      uint64                            // lock nodes cleanups took on by owner name (armGrant)
	done        chan struct{}
	hooks       hooks

	handshake  chan struct{} // closed once the granted timeout is known
	gotTimeout sync.Once
}

var (
	_ backend.Backend  = (*Backend)(nil)
	_ backend.Notifier = (*Backend)(nil)
	_ backend.Records  = (*Backend)(nil)
)

// Open connects as rawURL says (see ParseURL), then opts, and returns a
// backend that owns the connection. ctx bounds the wait for the session, as
// Config.ConnectTimeout does.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	cfg, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return cfg.open(ctx, opts)
}

// handshakeLogger reads the session timeout the server granted from the
// client's "authenticated" log line (go-zookeeper has no getter for it) and
// keeps the last other line (a failed connect or handshake, which carry no
// credentials), so that a session that never comes says why.
type handshakeLogger struct{ b *Backend }

func (l handshakeLogger) Printf(format string, args ...any) {
	if !strings.HasPrefix(format, "authenticated:") {
		l.b.mu.Lock()
		l.b.lastConnLog = fmt.Sprintf(format, args...)
		l.b.mu.Unlock()
		return
	}
	if len(args) == 2 {
		if ms, ok := args[1].(int32); ok {
			l.b.mu.Lock()
			l.b.negotiated = time.Duration(ms) * time.Millisecond
			l.b.mu.Unlock()
			l.b.gotTimeout.Do(func() { close(l.b.handshake) })
		}
	}
}

// OpenConfig connects as cfg says and waits for the session, at most
// cfg.ConnectTimeout and until ctx ends. The backend owns the connection.
func OpenConfig(ctx context.Context, cfg Config) (*Backend, error) {
	p, err := cfg.check()
	if err != nil {
		return nil, err
	}
	b := &Backend{prefix: p, acl: zk.WorldACL(zk.PermAll), timers: map[timerKey]*time.Timer{}, grants: map[grantRef]grantRec{}, grantAt: map[string]grantRef{}, grantBy: map[backend.Nonce]grantRef{}, unsureOf: map[backend.Nonce]unsureRec{}, settling: map[backend.Nonce]bool{}, abandoned: map[backend.Nonce][]chan struct{}{}, done: make(chan struct{}), handshake: make(chan struct{}), hooks: cfg.hooks}
	b.g = guard.Guard{Name: "zookeeper", MinTTL: MinTTL, Closed: b.check}
	callers := func(c *zk.Conn) { // WithConnOptions, before the backend's own
		for _, o := range cfg.ConnOptions {
			o(c)
		}
	}
	// The handshake bound first: a zk.WithDialer of the caller's replaces it.
	conn, events, err := zk.Connect(cfg.Servers, cfg.SessionTimeout, zk.WithDialer(handshakeDialer(cfg.SessionTimeout)), callers, zk.WithLogger(handshakeLogger{b}), zk.WithLogInfo(true))
	if err != nil {
		return nil, fmt.Errorf("zookeeper: connect to %v: %w", cfg.Servers, err)
	}
	b.conn = conn
	timeout := time.After(cfg.ConnectTimeout)
wait:
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				break wait
			}
		case <-timeout:
			conn.Close()
			b.mu.Lock()
			last := b.lastConnLog
			b.mu.Unlock()
			return nil, fmt.Errorf("zookeeper: no session with %v within %v (the client's last word: %q)", cfg.Servers, cfg.ConnectTimeout, last)
		case <-ctx.Done():
			conn.Close()
			return nil, fmt.Errorf("zookeeper: no session with %v: %w", cfg.Servers, context.Cause(ctx))
		}
	}
	// The granted timeout is logged right after the session event; without
	// it no TTL can be granted safely.
	select {
	case <-b.handshake:
	case <-timeout:
		conn.Close()
		return nil, fmt.Errorf("zookeeper: could not read the session timeout granted by %v", cfg.Servers)
	case <-ctx.Done():
		conn.Close()
		return nil, fmt.Errorf("zookeeper: could not read the session timeout granted by %v: %w", cfg.Servers, context.Cause(ctx))
	}
	go func() { // drain session events; watches have their own channels
		for range events {
		}
	}()
	if cfg.Username != "" {
		if err := conn.AddAuth("digest", []byte(cfg.Username+":"+cfg.Password)); err != nil {
			conn.Close()
			return nil, fmt.Errorf("zookeeper: digest auth as user %q failed: %v", cfg.Username, err)
		}
		b.acl = zk.DigestACL(zk.PermAll, cfg.Username, cfg.Password)
	}
	if err := b.ensure(b.prefix); err != nil {
		conn.Close()
		return nil, fmt.Errorf("zookeeper: %w", err)
	}
	for _, d := range []string{"/locks", "/jobs", "/fin", "/records", "/records-exp"} {
		if err := b.ensure(b.prefix + d); err != nil {
			conn.Close()
			return nil, fmt.Errorf("zookeeper: %w", err)
		}
	}
	return b, nil
}

// ensure creates path and its missing parents as persistent nodes.
func (b *Backend) ensure(path string) error {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	cur := ""
	for _, part := range parts {
		cur += "/" + part
		// Look first: ZooKeeper checks the parent's CREATE permission before
		// it reports that a node exists, so creating an existing tenant root
		// under a parent the tenant may only read would fail (NoAuth).
		if ok, _, err := b.conn.Exists(cur); err == nil && ok {
			continue
		}
		_, err := b.conn.Create(cur, nil, 0, b.acl)
		if err != nil && err != zk.ErrNodeExists {
			return b.wrap(err, "create "+cur)
		}
	}
	return nil
}

// Prefix is the root path of this backend's nodes.
func (b *Backend) Prefix() string { return b.prefix }

// Conn is the underlying ZooKeeper connection.
func (b *Backend) Conn() *zk.Conn { return b.conn }

// SessionTimeout is the session timeout the server granted.
func (b *Backend) SessionTimeout() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.negotiated
}

// grantTTL is min(ttl, negotiated session timeout).
func (b *Backend) grantTTL(ttl time.Duration) time.Duration {
	if n := b.SessionTimeout(); n > 0 && n < ttl {
		return n
	}
	return ttl
}

// Capabilities: safe, durable fencing from czxid; expiry of a silent holder
// is timed by the holder's own process (see the package doc), so no single
// server clock.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Name: "zookeeper", ServerClock: false, SafeFencing: true, DurableFencing: true,
		PushEvents: true, MultiProcess: true, MinTTL: MinTTL,
	}
}

// Close closes the session. When the close request reaches the server
// (Close waits for its reply for at most 1 s), ZooKeeper deletes the
// session's ephemeral nodes (locks and runners' leases) at once; when it
// does not (the client is cut off), they go when the session expires,
// within SessionTimeout.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.done)
	for p, t := range b.timers {
		t.Stop()
		delete(b.timers, p)
	}
	b.mu.Unlock()
	b.conn.Close()
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

// wrap wraps the error of a request that changes nothing if it was
// applied (a read, or a write whose loss is harmless): once the backend is
// closed, it is ErrClosed. what is what the request was doing, "" if it
// was the call itself (which the Guard names).
func (b *Backend) wrap(err error, what string) error {
	if err == nil {
		return nil
	}
	if b.check() != nil {
		err = backend.ErrClosed
	}
	return named(err, what)
}

// wrapSent wraps the error of a request that may have been applied and
// whose outcome matters (a create of a lock node or a claim): closing the
// backend while it was in flight leaves its outcome unknown, so the error
// does not wrap ErrClosed (a caller must not read it as "nothing
// happened"). The closed session's ephemeral nodes are deleted by the
// server, which is the only cleanup a closed client can do. what is as
// for wrap.
func (b *Backend) wrapSent(err error, what string) error {
	if err == nil {
		return nil
	}
	if b.check() != nil {
		err = fmt.Errorf("the backend was closed while the request was in flight, it may have been applied (closing the session deletes its ephemeral nodes): %w", err)
	}
	return named(err, what)
}

// named is err after what ("" for none).
func named(err error, what string) error {
	if what == "" {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}
