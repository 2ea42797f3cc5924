// Package redlock is the leasehold backend on N independent Redis nodes
// (default 5; any odd N ≥ 3) with the Redlock algorithm: a lease is granted
// when a majority (N/2+1) of nodes granted it within its validity.
//
// Acquire sends SET-if-free (a Lua script that also INCRs a per-node token
// counter) to every node in parallel, each bounded by a node timeout. With a
// quorum of grants, and validity = TTL' − elapsed − drift still positive
// (drift = 1% of the TTL + 2 ms), the lease is granted; otherwise it is
// undone where it may hold (see "A retry of the holder" below for what
// is kept).
// Nodes are asked for PX = TTL' = TTL + drift, so that
// counted from the send time — which is how the library counts the holder's
// deadline — the lease is valid for at least the TTL it was granted. Renew
// extends on every node and succeeds on a quorum; Release deletes
// everywhere and publishes the release on each node, so waiters wake at
// once (Wait fires when a quorum of nodes reports the key released or
// expired).
//
// # Fencing is not safe (SafeFencing=false)
//
// The token of a new grant is the largest of the per-node counters in the
// granting quorum (a repeated grant keeps its token: below), and when
// they differ the quorum's leases and counters are raised to it in a
// second round trip, so that any two quorums share a
// node whose counter already passed the earlier token. That makes tokens
// increase in ordinary operation, but Redlock cannot promise it, nor even
// mutual exclusion:
//
//   - a node restarted empty (no fsync'd AOF) forgets both the lease and
//     its counter: with one other node that missed the first grant, a
//     second client gets a quorum while the first lease is live, and a
//     token that is not greater (the tests demonstrate exactly this);
//   - a process pause (GC, SIGSTOP) or a client or server clock jump longer
//     than the drift allowance lets two holders believe they hold the lease;
//   - majority registers give no atomic increment: two concurrent quorums
//     with diverging counters can read the same maximum.
//
// So the backend declares SafeFencing=false and DurableFencing=false. Use
// the redis backend (one node, noeviction, appendfsync always) or a
// consensus backend when a resource must reject stale holders by token.
//
// # Late attempts and undos
//
// Each Acquire call has an attempt sequence greater than every earlier
// call's on the same Backend, and each node keeps, per key, the owner and
// sequence of the latest attempt it applied (a grant, a "yours", or an
// undo), for as long as the owner's lease lives there (renewals extend it)
// and, after a release or an undo, until it expires. An attempt of the
// same owner that arrives older than that record — a copy held in a TCP
// retransmission, or queued behind a connection, whose caller has moved
// on — changes nothing: no grant, no new record, no longer expiry. Its
// raise (the second round trip) rewrites the owner's lease only while the
// node's record still names that attempt, so a late raise cannot re-tag a
// retry's grant with an older attempt's token. An undo
// deletes the owner's lease only where no newer attempt of the owner was
// applied, and leaves its own record, so that the attempt it undoes is
// refused if it lands after it. So the Locker's retry (same owner nonce,
// after an unknown outcome) keeps its grant whatever order the earlier
// attempt, its undo and the retry reach a node in (TestAttemptInterleavings
// plays every order). What this does not cover: attempts of one owner made
// concurrently, or through two Backends, are not ordered (an owner nonce
// names one call and its retries, as the Locker uses it); and an attempt
// that lands where no record of its owner refuses it (the record expired;
// its undo found another owner's lease, whose record it leaves alone; or
// the node never saw a newer attempt before a release) can make a grant
// nobody holds, which keeps the key on that node until its TTL runs out:
// a wait for others, never a second holder.
//
// # A retry of the holder
//
// An Acquire with the holder's own nonce while its lease lives (a retry,
// or a copy of a call made late as a call of its own) answers the
// holder's token and keeps it. Nodes that had the owner's lease answer
// "yours" with the token their copy carries, and leave its expiry as it
// was; a token that those nodes and the nodes that gave no answer could
// make a quorum of may be a live holder's. With none, the call is a new
// grant (the largest token; a stray copy of an earlier attempt whose
// outcome was unknown is re-tagged with it, so tokens do not go back).
// With one that a quorum of "yours" names, the call answers it and
// re-tags the nodes that granted afresh. Either way the second round trip
// (the raise) then extends every copy to the new TTL. Otherwise (a node
// of the holder's quorum unreachable, say) the outcome is unknown: no
// copy is re-tagged or extended, and only the call's own fresh grants are
// undone (TestRetryOfTheHolderKeepsItsToken); strays then run out at
// their own expiry, so the Locker's retries do not keep them alive (a
// call decided a grant whose raise then reaches fewer than a quorum fails
// having extended the copies it reached: bounded by one TTL, as any call
// whose outcome is unknown). Nor is such a call answered "held by
// another" while a node it could not reach may hold the holder's copy
// (TestRetryOfTheHolderIsNotAnsweredHeld). A
// call that fails short of a quorum while a live holder may hold the
// lease likewise undoes only its fresh grants, never a copy a node had
// before the call nor one on a node that gave no answer
// (TestFailedRetryOfTheHolderKeepsItsLease); when no holder can, it
// undoes every copy of the owner's lease it may have touched.
//
// A failed Acquire says backend.ErrNotApplied only when the request was
// sent to no node. When a quorum of nodes may still hold its grant (sent
// with no reply, or granted, and no confirmed undo) its outcome is unknown,
// even if another owner's lease was seen: the error matches neither
// ErrNotApplied nor ErrHeld, so the Locker retries under the same nonce,
// and when it gives up reports ErrIndeterminate and releases the grant if
// it finds it. Otherwise, a *backend.HeldError names
// the holder seen on most nodes when there is one.
//
// # No run ledger
//
// A run ledger needs a per-job counter that strictly increases, claims that
// are never lost once finished, and compare-and-set transitions; a majority
// of independent Redis nodes without consensus cannot provide any of them
// (a restarted node loses records, split votes leave no winner). So the
// backend implements backend.Leases and backend.Notifier, not
// backend.Ledger: the scheduler refuses it (backend.LedgerOf names it), and
// the conformance suite skips its ledger checks by that declaration.
package redlock

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
	rb "github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/internal/closegate"
	"github.com/leasehold/leasehold/internal/guard"
	"github.com/leasehold/leasehold/internal/redact"
	"github.com/leasehold/leasehold/internal/redispipe"
)

// MinTTL is the shortest lease granted: a lease shorter than the node
// timeout and drift allowance could not be confirmed in time.
const MinTTL = 50 * time.Millisecond

// DefaultNodeTimeout bounds each node's reply to an acquire or renew (a
// release, which is not racing a validity, gets 10× as long, at least 1 s).
const DefaultNodeTimeout = 100 * time.Millisecond

// Backend is the Redlock backend. Create it with New or Open.
type Backend struct {
	g           guard.Guard // checks, closed state (gate), failure names: "redlock"
	nodes       []*node
	quorum      int
	prefix      string
	nodeTimeout time.Duration
	gate        closegate.Gate
	lastAttempt atomic.Uint64 // the last Acquire's attempt sequence (nextAttempt)
}

type node struct {
	c    goredis.UniversalClient
	p    *redispipe.Pipe // the node's script calls, grouped (internal/redispipe)
	w    *rb.Backend     // push events (and, after Open, the connection's owner)
	owns bool
}

var (
	_ backend.Leases   = (*Backend)(nil)
	_ backend.Notifier = (*Backend)(nil)
)

// Option configures New and Open. Each validates its argument: New and
// Open return the first error, wrapping backend.ErrInvalid and naming the
// option and the value.
type Option func(*config) error

type config struct {
	prefix      string
	nodeTimeout time.Duration
	make        makers
}

// makers make a node's pipe, its push-event backend over a given client,
// and its backend over a connection of its own (tests wrap them to record
// what a failed New or Open made, and see it closed).
type makers struct {
	newPipe  func(goredis.UniversalClient) *redispipe.Pipe
	newWatch func(goredis.UniversalClient, ...rb.Option) (*rb.Backend, error)
	openNode func(context.Context, string, ...rb.Option) (*rb.Backend, error)
}

// WithPrefix sets the key prefix on every node (default "leasehold:").
// Like redis.WithPrefix's, it may not contain braces.
func WithPrefix(p string) Option {
	return func(c *config) error {
		if err := rb.CheckPrefix(p); err != nil {
			return err
		}
		c.prefix = p
		return nil
	}
}

// WithNodeTimeout bounds each node's reply (default 100 ms; positive). Use
// clients with ContextTimeoutEnabled so that the bound applies to reads.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithNodeTimeout(%v): not positive", backend.ErrInvalid, d)
		}
		c.nodeTimeout = d
		return nil
	}
}

// New returns a backend over clients, one per independent node (an odd
// number, at least 3). The caller keeps owning the clients.
func New(clients []goredis.UniversalClient, opts ...Option) (*Backend, error) {
	if n := len(clients); n < 3 || n%2 == 0 {
		return nil, fmt.Errorf("%w: redlock nodes: %d given, need an odd number ≥ 3", backend.ErrInvalid, n)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	b := &Backend{quorum: len(clients)/2 + 1, prefix: cfg.prefix, nodeTimeout: cfg.nodeTimeout}
	b.g = guard.Guard{Name: "redlock", MinTTL: MinTTL, Closed: b.gate.Check}
	for i, c := range clients {
		w, err := cfg.make.newWatch(c, rb.WithPrefix(cfg.prefix))
		if err != nil {
			// The nodes made so far are closed: their pipes and push
			// event backends would otherwise outlive a backend nobody
			// holds (and Close closes the connections of none: New's
			// caller owns them).
			b.closeNodes()
			return nil, fmt.Errorf("redlock node %d: %w", i, err)
		}
		b.nodes = append(b.nodes, &node{c: c, p: cfg.make.newPipe(c), w: w})
	}
	return b, nil
}

// newConfig applies opts to the defaults and checks the result.
func newConfig(opts []Option) (config, error) {
	cfg := config{prefix: rb.DefaultPrefix, nodeTimeout: DefaultNodeTimeout,
		make: makers{newPipe: redispipe.New, newWatch: rb.New, openNode: rb.Open}}
	for _, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("%w: nil redlock option", backend.ErrInvalid)
		}
		if err := o(&cfg); err != nil {
			return config{}, err
		}
	}
	if cfg.nodeTimeout <= 0 {
		return config{}, fmt.Errorf("%w: node timeout %v is not positive", backend.ErrInvalid, cfg.nodeTimeout)
	}
	return cfg, nil
}

// Open connects to the nodes a redlock URL names and returns a backend that
// owns the connections:
//
//	redlock://[user:password@]host1:6379,host2:6379,host3:6379[/db][?params]
//	redlocks://...   the same over TLS (each node as rediss://)
//
// Every node gets the same user, password, database and parameters. The
// parameters are those of the redis backend's URL (go-redis's dial_timeout,
// pool_size, skip_verify, …, and prefix), plus node_timeout (a Go duration,
// see WithNodeTimeout). Options given to Open override the URL's. Errors
// name the field and value, and never show the password.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	nodes, urlOpts, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return openNodes(ctx, nodes, append(urlOpts, opts...)...)
}

// parseURL splits a redlock URL into one redis URL per node and the
// options its redlock parameters set.
func parseURL(rawURL string) ([]string, []Option, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: redlock URL: %s", backend.ErrInvalid, redact.ParseReason(err))
	}
	nodeScheme := map[string]string{"redlock": "redis", "redlocks": "rediss"}[strings.ToLower(u.Scheme)]
	if nodeScheme == "" {
		return nil, nil, fmt.Errorf("%w: redlock URL %q: scheme %q is not redlock or redlocks", backend.ErrInvalid, u.Redacted(), u.Scheme)
	}
	if u.Opaque != "" || u.Fragment != "" {
		return nil, nil, fmt.Errorf("%w: redlock URL %q: want redlock://host1:port,host2:port,host3:port[/db]", backend.ErrInvalid, u.Redacted())
	}
	var opts []Option
	q := u.Query()
	if q.Has("node_timeout") {
		v := q.Get("node_timeout")
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, nil, fmt.Errorf("%w: redlock URL %q: node_timeout %q is not a positive duration", backend.ErrInvalid, u.Redacted(), v)
		}
		opts = append(opts, WithNodeTimeout(d))
		q.Del("node_timeout")
	}
	if q.Has("prefix") {
		opts = append(opts, WithPrefix(q.Get("prefix")))
		q.Del("prefix")
	}
	var nodes []string
	for i, h := range strings.Split(u.Host, ",") {
		if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
			return nil, nil, fmt.Errorf("%w: redlock URL %q: node %d host %q is not host:port", backend.ErrInvalid, u.Redacted(), i, h)
		}
		n := url.URL{Scheme: nodeScheme, User: u.User, Host: h, Path: u.Path, RawQuery: q.Encode()}
		nodes = append(nodes, n.String())
	}
	if n := len(nodes); n < 3 || n%2 == 0 {
		return nil, nil, fmt.Errorf("%w: redlock URL %q: %d nodes given, need an odd number ≥ 3", backend.ErrInvalid, u.Redacted(), n)
	}
	return nodes, opts, nil
}

// openNodes connects to every redis URL and returns a backend that owns
// the connections.
// Options are checked before any node is dialled; on any failure the
// connections dialled so far are closed.
func openNodes(ctx context.Context, urls []string, opts ...Option) (*Backend, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	var ws []*rb.Backend
	fail := func(err error) (*Backend, error) {
		for _, w := range ws {
			w.Close()
		}
		return nil, err
	}
	var clients []goredis.UniversalClient
	for i, u := range urls {
		w, err := cfg.make.openNode(ctx, u, rb.WithPrefix(cfg.prefix))
		if err != nil {
			return fail(fmt.Errorf("redlock node %d: %w", i, err))
		}
		ws = append(ws, w)
		clients = append(clients, w.Client())
	}
	b, err := New(clients, opts...)
	if err != nil {
		return fail(err)
	}
	for i, n := range b.nodes {
		n.w.Close()
		n.w, n.owns = ws[i], true
	}
	return b, nil
}

// Capabilities: no safe fencing (see the package doc).
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Name: "redlock",
		// Expiry is judged by the nodes' clocks (PX), never by a client's.
		ServerClock:    true,
		SafeFencing:    false,
		DurableFencing: false,
		PushEvents:     true,
		MultiProcess:   true,
		MinTTL:         MinTTL,
		TTLGranularity: time.Millisecond,
	}
}

// Quorum is the number of nodes a grant needs.
func (b *Backend) Quorum() int { return b.quorum }

// Close closes the per-node subscriptions (and connections Open made).
func (b *Backend) Close() error {
	if !b.gate.Shut() {
		return nil
	}
	b.closeNodes()
	return nil
}

// closeNodes closes every node's pipe and push-event backend (which closes
// the connection when Open made it).
func (b *Backend) closeNodes() {
	for _, n := range b.nodes {
		n.p.Close()
		n.w.Close()
	}
}

// each runs fn on every node in parallel, each bounded by timeout, and
// waits for all.
func (b *Backend) each(ctx context.Context, timeout time.Duration, fn func(ctx context.Context, i int, n *node)) {
	var wg sync.WaitGroup
	for i, n := range b.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			fn(nctx, i, n)
		}()
	}
	wg.Wait()
}

// onAll sends script to every node at once (each through its pipe) with
// one context bounded by timeout, and returns every node's reply, in node
// order, when all are in or the context has ended. No goroutine or context
// per node: a crowd of callers would spend more on those than on the calls.
func (b *Backend) onAll(ctx context.Context, timeout time.Duration, script *goredis.Script, keys []string, args ...any) []*goredis.Cmd {
	nctx := ctx
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > timeout {
		var cancel context.CancelFunc
		nctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	ps := make([]*redispipe.Pending, len(b.nodes))
	for i, n := range b.nodes {
		ps[i] = n.p.Start(nctx, script, keys, args...)
	}
	out := make([]*goredis.Cmd, len(ps))
	for i, w := range ps {
		out[i] = w.Wait()
	}
	return out
}

func (b *Backend) leaseKey(k string) string { return b.prefix + "lease:{" + k + "}" }
func (b *Backend) tokenKey(k string) string { return b.prefix + "token:{" + k + "}" }

// attemptKey holds the owner and sequence of the latest Acquire attempt a
// node applied on k (see acquireScript).
func (b *Backend) attemptKey(k string) string { return b.prefix + "attempt:{" + k + "}" }
func (b *Backend) channel(k string) string    { return b.prefix + "released:{" + k + "}" }

// drift is Redlock's clock drift allowance for a TTL.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

func ceilMS(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }
