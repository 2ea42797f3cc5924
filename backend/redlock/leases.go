package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
)

// Per-node scripts. A lease's value is "token:nonce:instance", as in the
// redis backend.

// acquireScript: KEYS lease, counter, attempt; ARGV owner
// ("nonce:instance"), px, attempt id. {1, token} granted or retried by the
// same owner (expiry moved to px); {0, value, pttl} held by another. Either
// grant records the attempt id (with the same expiry), which an undo must
// match: see undoScript.
const acquireScript = `
local v = redis.call('GET', KEYS[1])
if v then
  local i = string.find(v, ':', 1, true)
  if string.sub(v, i + 1) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
    return {1, string.sub(v, 1, i - 1)}
  end
  return {0, v, redis.call('PTTL', KEYS[1])}
end
local t = string.format('%d', redis.call('INCR', KEYS[2]))
redis.call('SET', KEYS[1], t .. ':' .. ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
return {1, t}
`

// undoScript: KEYS lease, attempt; ARGV owner, channel, attempt id. Deletes
// the owner's lease (whatever its token: a node whose reply was lost holds
// it under a token nobody read) and publishes — only if the last grant on
// this node was the attempt being undone. A retry with the same nonce that
// came after records its own attempt id, so an undo that lands late (held
// in a retransmission, or queued behind a connection) leaves the retry's
// grant alone. 1 deleted, 0 not.
const undoScript = `
if redis.call('GET', KEYS[2]) ~= ARGV[3] then return 0 end
local v = redis.call('GET', KEYS[1])
if v then
  local i = string.find(v, ':', 1, true)
  if string.sub(v, i + 1) == ARGV[1] then
    redis.call('DEL', KEYS[1], KEYS[2])
    redis.call('PUBLISH', ARGV[2], '')
    return 1
  end
end
return 0
`

// raiseScript: KEYS lease, counter; ARGV owner, token. Rewrites the
// owner's lease to carry token (expiry kept) and raises the counter to at
// least token. 1 if the owner's lease was there.
const raiseScript = `
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
if c < tonumber(ARGV[2]) then redis.call('SET', KEYS[2], ARGV[2]) end
local v = redis.call('GET', KEYS[1])
if v then
  local i = string.find(v, ':', 1, true)
  if string.sub(v, i + 1) == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[2] .. ':' .. ARGV[1], 'KEEPTTL')
    return 1
  end
end
return 0
`

// renewScript: KEYS lease; ARGV value, px. 1 or 0.
const renewScript = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`

// releaseScript: KEYS lease; ARGV owner, channel, token. Deletes the
// owner's lease whatever its token (a nonce names one grant; a node whose
// reply was lost may hold it under its own token) and publishes.
// 1 released with this token, 2 released with another, 0 not held.
const releaseScript = `
local v = redis.call('GET', KEYS[1])
if v then
  local i = string.find(v, ':', 1, true)
  if string.sub(v, i + 1) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', ARGV[2], '')
    if string.sub(v, 1, i - 1) == ARGV[3] then return 1 end
    return 2
  end
end
return 0
`

// getScript: KEYS lease. {value, pttl} or false.
const getScript = `
local v = redis.call('GET', KEYS[1])
if not v then return false end
return {v, redis.call('PTTL', KEYS[1])}
`

var (
	acquireLua = goredis.NewScript(acquireScript)
	raiseLua   = goredis.NewScript(raiseScript)
	renewLua   = goredis.NewScript(renewScript)
	releaseLua = goredis.NewScript(releaseScript)
	undoLua    = goredis.NewScript(undoScript)
	getLua     = goredis.NewScript(getScript)
)

func ownerArg(o backend.Owner) string { return o.Nonce.String() + ":" + o.Instance }

func parseValue(key, v string) (backend.Lease, error) {
	tok, rest, ok1 := strings.Cut(v, ":")
	nonce, inst, ok2 := strings.Cut(rest, ":")
	t, err := strconv.ParseUint(tok, 10, 64)
	n, nerr := backend.ParseNonce(nonce)
	if !ok1 || !ok2 || err != nil || nerr != nil {
		return backend.Lease{}, fmt.Errorf("redlock: lease %q has malformed value %q", key, v)
	}
	return backend.Lease{Key: key, Owner: backend.Owner{Instance: inst, Nonce: n}, Token: t}, nil
}

// remaining converts a node's PTTL (which includes the drift allowance)
// into a conservative remaining TTL.
func remaining(pttl time.Duration) time.Duration {
	r := (pttl - 3*time.Millisecond) * 100 / 101
	return max(r, 0)
}

type nodeReply struct {
	ok     bool
	token  uint64
	holder string // value held by another owner
	pttl   time.Duration
	err    error
	// notSent: the request never left the node's queue (err wraps
	// ErrNotApplied), so the node holds nothing of it.
	notSent bool
}

// Acquire implements backend.Leases with Redlock's quorum grant.
func (b *Backend) Acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	if err := backend.CheckLease(key, owner, ttl, MinTTL); err != nil {
		return backend.Grant{}, err
	}
	if err := b.check(); err != nil {
		return backend.Grant{}, err
	}
	ttl = time.Duration(ceilMS(ttl)) * time.Millisecond
	px := ceilMS(ttl + drift(ttl))
	oa := ownerArg(owner)
	attempt := backend.NewNonce().String() // this call's: what an undo of it must match
	start := time.Now()
	rs := make([]nodeReply, len(b.nodes))
	for i, c := range b.onAll(ctx, b.nodeTimeout, acquireLua, []string{b.leaseKey(key), b.tokenKey(key), b.attemptKey(key)}, oa, px, attempt) {
		res, err := c.Slice()
		switch {
		case err != nil:
			rs[i].err = err
			rs[i].notSent = errors.Is(err, backend.ErrNotApplied)
		case len(res) == 2:
			rs[i].ok = true
			rs[i].token, rs[i].err = strconv.ParseUint(fmt.Sprint(res[1]), 10, 64)
		case len(res) == 3:
			rs[i].holder = fmt.Sprint(res[1])
			rs[i].pttl = time.Duration(toInt(res[2])) * time.Millisecond
		default:
			rs[i].err = fmt.Errorf("unexpected reply %v", res)
		}
	}
	var (
		granted []int
		top     uint64
		firstEr error
		nerr    int
	)
	for i, r := range rs {
		if r.ok && r.err == nil {
			granted = append(granted, i)
			top = max(top, r.token)
		}
		if r.err != nil {
			nerr++
			if firstEr == nil {
				firstEr = fmt.Errorf("node %d: %w", i, r.err)
			}
		}
	}
	validity := time.Duration(px)*time.Millisecond - time.Since(start) - drift(ttl)
	if len(granted) >= b.quorum && validity > 0 && b.raise(ctx, key, oa, top, granted, rs) {
		return backend.Grant{Token: top, TTL: ttl}, nil
	}
	if err := b.undo(ctx, key, owner, attempt, rs); err != nil {
		return backend.Grant{}, fmt.Errorf("redlock: acquire %q: %d of %d nodes granted, quorum %d: %w", key, len(granted), len(b.nodes), b.quorum, err)
	}
	// Report the holder seen on most nodes, if any.
	votes := map[string]int{}
	var best string
	var bestPTTL time.Duration
	for _, r := range rs {
		if r.holder != "" {
			votes[r.holder]++
			if votes[r.holder] > votes[best] {
				best, bestPTTL = r.holder, r.pttl
			}
		}
	}
	if best != "" {
		l, err := parseValue(key, best)
		if err != nil {
			return backend.Grant{}, err
		}
		l.Remaining = remaining(bestPTTL)
		return backend.Grant{}, &backend.HeldError{Holder: l}
	}
	if nerr > 0 {
		if !slices.ContainsFunc(rs, func(r nodeReply) bool { return !r.notSent }) {
			// Sent to no node: nothing of it exists anywhere.
			return backend.Grant{}, fmt.Errorf("redlock: acquire %q: sent to none of %d nodes: %w", key, len(b.nodes), firstEr)
		}
		return backend.Grant{}, fmt.Errorf("redlock: acquire %q: %d of %d nodes granted, quorum %d: %w", key, len(granted), len(b.nodes), b.quorum, firstEr)
	}
	return backend.Grant{}, fmt.Errorf("redlock: acquire %q: %d of %d nodes granted, validity left %v", key, len(granted), len(b.nodes), validity)
}

// raise makes the granting quorum agree on token top (lease values and
// counters) when their counters differed. It reports whether a quorum now
// carries top.
func (b *Backend) raise(ctx context.Context, key, oa string, top uint64, granted []int, rs []nodeReply) bool {
	var fix []int
	for _, i := range granted {
		if rs[i].token != top {
			fix = append(fix, i)
		}
	}
	if len(fix) == 0 {
		return true
	}
	var mu sync.Mutex
	at := len(granted) - len(fix)
	b.each(ctx, b.nodeTimeout, func(ctx context.Context, i int, n *node) {
		if !slices.Contains(fix, i) {
			return
		}
		v, err := n.p.Do(ctx, raiseLua, []string{b.leaseKey(key), b.tokenKey(key)}, oa, top).Int()
		if err == nil && v == 1 {
			mu.Lock()
			at++
			mu.Unlock()
		}
	})
	return at >= b.quorum
}

// undo deletes owner's lease on every node where the acquire (attempt) may
// have been applied (granted, or no reply), unless a later attempt granted
// it there since (undoScript), even when the caller's ctx has ended; a
// node that answered "held by another", or that was never sent the
// request, holds nothing of it. It waits for the deletions until ctx ends,
// not longer: then it returns an error (the acquire's outcome is unknown
// to the caller, which must not retry under this nonce while the deletions
// may still land) and the deletions go on in the background.
func (b *Backend) undo(ctx context.Context, key string, owner backend.Owner, attempt string, rs []nodeReply) error {
	if !slices.ContainsFunc(rs, func(r nodeReply) bool { return mayHold(r) }) {
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.each(context.Background(), b.nodeTimeout, func(ctx context.Context, i int, n *node) {
			if !mayHold(rs[i]) {
				return
			}
			_ = n.p.Do(ctx, undoLua, []string{b.leaseKey(key), b.attemptKey(key)}, ownerArg(owner), b.channel(key), attempt).Err()
		})
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("undoing a partial grant: %w", context.Cause(ctx))
	}
}

// mayHold: the node may hold the acquire's lease (granted, or sent with no
// reply).
func mayHold(r nodeReply) bool {
	return r.ok || (r.err != nil && !r.notSent)
}

// Renew implements backend.Leases: extends on every node, succeeds on a
// quorum within the validity.
func (b *Backend) Renew(ctx context.Context, key string, owner backend.Owner, token uint64, ttl time.Duration) (backend.Grant, error) {
	if err := backend.CheckRenew(key, owner, token, ttl, MinTTL); err != nil {
		return backend.Grant{}, err
	}
	if err := b.check(); err != nil {
		return backend.Grant{}, err
	}
	ttl = time.Duration(ceilMS(ttl)) * time.Millisecond
	px := ceilMS(ttl + drift(ttl))
	val := strconv.FormatUint(token, 10) + ":" + ownerArg(owner)
	start := time.Now()
	var ok, lost int
	var firstEr error
	for i, c := range b.onAll(ctx, b.nodeTimeout, renewLua, []string{b.leaseKey(key)}, val, px) {
		v, err := c.Int()
		switch {
		case err != nil:
			if firstEr == nil {
				firstEr = fmt.Errorf("node %d: %w", i, err)
			}
		case v == 1:
			ok++
		default:
			lost++
		}
	}
	validity := time.Duration(px)*time.Millisecond - time.Since(start) - drift(ttl)
	if ok >= b.quorum && validity > 0 {
		return backend.Grant{Token: token, TTL: ttl}, nil
	}
	if lost > len(b.nodes)-b.quorum || firstEr == nil {
		return backend.Grant{}, fmt.Errorf("%w: key %q, token %d: renewed on %d of %d nodes, quorum %d", backend.ErrLeaseLost, key, token, ok, len(b.nodes), b.quorum)
	}
	return backend.Grant{}, fmt.Errorf("redlock: renew %q token %d: renewed on %d of %d nodes, quorum %d: %w", key, token, ok, len(b.nodes), b.quorum, firstEr)
}

// Release implements backend.Leases: deletes the owner's lease on every
// node (each publishes the release). The counters are kept.
func (b *Backend) Release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	if err := backend.CheckRelease(key, owner, token); err != nil {
		return err
	}
	if err := b.check(); err != nil {
		return err
	}
	var exact int
	var firstEr error
	for i, c := range b.onAll(ctx, max(10*b.nodeTimeout, time.Second), releaseLua, []string{b.leaseKey(key)},
		ownerArg(owner), b.channel(key), strconv.FormatUint(token, 10)) {
		v, err := c.Int()
		switch {
		case err != nil:
			if firstEr == nil {
				firstEr = fmt.Errorf("node %d: %w", i, err)
			}
		case v == 1:
			exact++
		}
	}
	switch {
	case exact >= b.quorum:
		return nil
	case firstEr != nil:
		return fmt.Errorf("redlock: release %q token %d: released on %d of %d nodes: %w", key, token, exact, len(b.nodes), firstEr)
	}
	return fmt.Errorf("%w: key %q, token %d", backend.ErrLeaseLost, key, token)
}

// Get implements backend.Leases: the lease held with the same value on a
// quorum of nodes, with the time a quorum still holds it.
func (b *Backend) Get(ctx context.Context, key string) (backend.Lease, error) {
	if err := backend.CheckKey("key", key); err != nil {
		return backend.Lease{}, err
	}
	if err := b.check(); err != nil {
		return backend.Lease{}, err
	}
	type seen struct {
		v    string
		pttl time.Duration
	}
	var vals []seen
	var firstEr error
	for i, c := range b.onAll(ctx, b.nodeTimeout, getLua, []string{b.leaseKey(key)}) {
		res, err := c.Slice()
		switch {
		case errors.Is(err, goredis.Nil):
		case err != nil:
			if firstEr == nil {
				firstEr = fmt.Errorf("node %d: %w", i, err)
			}
		case len(res) == 2:
			vals = append(vals, seen{fmt.Sprint(res[0]), time.Duration(toInt(res[1])) * time.Millisecond})
		}
	}
	byVal := map[string][]time.Duration{}
	for _, s := range vals {
		byVal[s.v] = append(byVal[s.v], s.pttl)
	}
	for v, ps := range byVal {
		if len(ps) >= b.quorum {
			sort.Slice(ps, func(i, j int) bool { return ps[i] > ps[j] })
			l, err := parseValue(key, v)
			if err != nil {
				return backend.Lease{}, err
			}
			l.Remaining = remaining(ps[b.quorum-1])
			return l, nil
		}
	}
	if firstEr != nil && len(vals)+b.quorum > 0 {
		return backend.Lease{}, fmt.Errorf("redlock: get %q: %w", key, firstEr)
	}
	return backend.Lease{}, fmt.Errorf("%w: key %q", backend.ErrNotFound, key)
}

// List implements backend.Leases: the union of the nodes' lease keys, each
// read with Get (no snapshot).
func (b *Backend) List(ctx context.Context, prefix string, limit int) ([]backend.Lease, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	match := globEscape(b.prefix) + "lease:{" + globEscape(prefix) + "*"
	var mu sync.Mutex
	names := map[string]bool{}
	var wg sync.WaitGroup
	for _, n := range b.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			it := n.c.Scan(ctx, 0, match, 1000).Iterator()
			for it.Next(ctx) {
				k := it.Val()
				if !strings.HasSuffix(k, "}") {
					continue
				}
				name := k[len(b.prefix)+len("lease:{") : len(k)-1]
				if strings.HasPrefix(name, prefix) {
					mu.Lock()
					names[name] = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	var out []backend.Lease
	for _, name := range sorted {
		l, err := b.Get(ctx, name)
		if errors.Is(err, backend.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, l)
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out, nil
}

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

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}
