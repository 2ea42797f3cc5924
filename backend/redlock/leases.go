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

// Acquire implements backend.Leases with Redlock's quorum grant.
func (b *Backend) Acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	return b.g.Acquire(ctx, key, owner, ttl, b.acquire)
}

func (b *Backend) acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	ttl = time.Duration(ceilMS(ttl)) * time.Millisecond
	px := ceilMS(ttl + drift(ttl))
	att := b.nextAttempt()
	start := time.Now()
	keys, args := b.acquireCall(key, owner, px, att)
	rs := make([]nodeReply, len(b.nodes))
	for i, c := range b.onAll(ctx, b.nodeTimeout, acquireLua, keys, args...) {
		rs[i] = acquireReply(c)
	}
	var granted []int
	for i, r := range rs {
		if r.ok && r.err == nil {
			granted = append(granted, i)
		}
	}
	validity := time.Duration(px)*time.Millisecond - time.Since(start) - drift(ttl)
	failed := fmt.Sprintf("%d of %d nodes granted, quorum %d", len(granted), len(b.nodes), b.quorum)
	held := holderTokens(rs, b.quorum)
	if len(granted) >= b.quorum && validity > 0 {
		top, known := grantToken(rs, granted, held, b.quorum)
		if !known {
			// No raise (it could re-tag the holder's quorum); only this
			// call's own fresh grants are undone below.
			failed += fmt.Sprintf(": the owner's lease was already on nodes %v under tokens %v that a live holder may carry, and no quorum names one", yoursNodes(rs), held)
		} else if b.raise(ctx, key, owner, att, top, px, granted, rs) {
			return backend.Grant{Token: top, TTL: ttl}, nil
		}
	}
	if !slices.ContainsFunc(rs, func(r nodeReply) bool { return !r.notSent }) {
		// Sent to no node: nothing of it exists anywhere. The only
		// failure that may say so (backend.ErrNotApplied).
		return backend.Grant{}, fmt.Errorf("sent to none of %d nodes: %w", len(b.nodes), rs[0].err)
	}
	// What to undo: where a live holder may carry the owner's lease (held
	// is not empty), only the leases this call made afresh — a node that
	// said "yours", or gave no answer, may hold the holder's lease. Else
	// every node that may hold the owner's lease: it is a stray of an
	// earlier attempt whose outcome was unknown, or this call's.
	undoable := mayHold
	if len(held) > 0 {
		undoable = madeHere
	}
	undone, err := b.undo(ctx, key, owner, px, att, rs, undoable)
	if err != nil {
		return backend.Grant{}, fmt.Errorf("%s: %w", failed, err)
	}
	// Nodes that may still hold the owner's lease: applied, or sent with
	// no reply, and not undone (a confirmed undo also refuses the attempt
	// if it lands later); and, while a live holder may hold it, a node
	// that was not sent the call (it may hold the holder's copy). With a
	// quorum of them the owner may hold the key: the outcome is unknown,
	// whatever else was seen.
	var maybe []int
	for i, r := range rs {
		if mayHold(r) && (!undoable(r) || undone[i] != nil) || len(held) > 0 && r.notSent {
			maybe = append(maybe, i)
		}
	}
	if len(maybe) >= b.quorum {
		cause := errors.New("the owner's lease was there before the call and is kept")
		for _, i := range maybe {
			if rs[i].err != nil {
				cause = fmt.Errorf("node %d: %w", i, sent(rs[i].err))
				break
			}
			if undone[i] != nil {
				cause = fmt.Errorf("node %d: its undo: %w", i, sent(undone[i]))
				break
			}
		}
		return backend.Grant{}, fmt.Errorf("%s: outcome unknown: nodes %v may hold the owner's lease (no reply, no confirmed undo, or there before the call): %w",
			failed, maybe, cause)
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
	// Some node was sent the request: whatever the errors, not "not
	// applied" (the caller treats the outcome as unknown).
	for i, r := range rs {
		if r.err != nil && !r.notSent {
			return backend.Grant{}, fmt.Errorf("%s: node %d: %w", failed, i, sent(r.err))
		}
	}
	for i, r := range rs {
		if r.err != nil {
			return backend.Grant{}, fmt.Errorf("%s: node %d: %w", failed, i, sent(r.err))
		}
	}
	return backend.Grant{}, fmt.Errorf("%s, validity left %v", failed, validity)
}

// holderTokens lists the tokens a live holder of the owner's nonce may
// carry, as seen by this call: a token some node answered "yours" with,
// and that those nodes plus the nodes that gave no answer (no reply, or
// not sent) could make a quorum of. A holder's quorum carries one token,
// and each of its nodes answers "yours" with it or no answer (one that
// answered "fresh" lost the lease: it expired there; "held by another" or
// "stale" cannot come from it while it lives, save for calls of one nonce
// made concurrently, which are not ordered). A token outside the list is
// a stray: a lease of an earlier attempt whose outcome was unknown, which
// no quorum holds.
func holderTokens(rs []nodeReply, quorum int) []uint64 {
	votes := map[uint64]int{}
	silent := 0
	for _, r := range rs {
		switch {
		case r.yours && r.err == nil:
			votes[r.token]++
		case r.err != nil && !r.stale:
			silent++
		}
	}
	var out []uint64
	for t, n := range votes {
		if n+silent >= quorum {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// grantToken is the token a quorum grant (granted: the nodes that
// granted; held: holderTokens) answers. With no token a live holder may
// carry, a new grant: the largest token granted (raise then re-tags every
// granting node, a stray "yours" too). With one, named by a quorum of
// "yours" answers: the holder's grant, repeated — its token is answered
// and kept (the holder's Renew and Release name it), and raise re-tags the
// nodes that granted afresh. Otherwise a live holder may carry a token
// that no quorum here names: it cannot be told, and known is false.
func grantToken(rs []nodeReply, granted []int, held []uint64, quorum int) (top uint64, known bool) {
	switch len(held) {
	case 0:
		for _, i := range granted {
			top = max(top, rs[i].token)
		}
		return top, true
	case 1:
		n := 0
		for _, i := range granted {
			if rs[i].yours && rs[i].token == held[0] {
				n++
			}
		}
		return held[0], n >= quorum
	}
	return 0, false
}

// yoursNodes lists the nodes that answered "yours".
func yoursNodes(rs []nodeReply) []int {
	var out []int
	for i, r := range rs {
		if r.yours {
			out = append(out, i)
		}
	}
	return out
}

// sent is err, a node's error, as part of a request that was sent to some
// node: it keeps err's message and its match of the context's errors, but
// no longer matches backend.ErrNotApplied, which holds for the node alone.
func sent(err error) error {
	if !errors.Is(err, backend.ErrNotApplied) {
		return err
	}
	for _, c := range []error{context.DeadlineExceeded, context.Canceled, backend.ErrClosed} {
		if errors.Is(err, c) {
			return fmt.Errorf("%v: %w", err, c)
		}
	}
	return errors.New(err.Error())
}

// nodeErrors gathers the node errors of one call to every node (Renew,
// Release). The call may say ErrNotApplied only if no node was sent the
// request: when a node's request never left its queue but another node
// answered or was sent (it may have applied), the first error is passed
// through sent.
type nodeErrors struct {
	first   error
	anySent bool
}

func (e *nodeErrors) add(i int, err error) {
	if err == nil || !errors.Is(err, backend.ErrNotApplied) {
		e.anySent = true
	}
	if err != nil && e.first == nil {
		e.first = fmt.Errorf("node %d: %w", i, err)
	}
}

// err is the call's error from its node errors (nil if none failed).
func (e *nodeErrors) err() error {
	if e.first != nil && e.anySent {
		return sent(e.first)
	}
	return e.first
}

// raise makes the granting quorum agree on token top (lease values and
// counters) when their counters differed, and extends the copies that
// answered "yours" (the acquire script leaves their expiry as it was). It
// reports whether a quorum now carries top.
func (b *Backend) raise(ctx context.Context, key string, owner backend.Owner, a attempt, top uint64, px int64, granted []int, rs []nodeReply) bool {
	var fix []int
	for _, i := range granted {
		if rs[i].token != top || rs[i].yours {
			fix = append(fix, i)
		}
	}
	if len(fix) == 0 {
		return true
	}
	var mu sync.Mutex
	at := len(granted) - len(fix)
	keys, args := b.raiseCall(key, owner, top, px, a)
	b.each(ctx, b.nodeTimeout, func(ctx context.Context, i int, n *node) {
		if !slices.Contains(fix, i) {
			return
		}
		v, err := n.p.Do(ctx, raiseLua, keys, args...).Int()
		if err == nil && v == 1 {
			mu.Lock()
			at++
			mu.Unlock()
		}
	})
	return at >= b.quorum
}

// undo deletes owner's lease on every node undoable says (of those where
// the acquire, attempt a, may have been applied), unless a later attempt of
// owner was applied there since, and marks there that a is undone, so
// that a landing later is refused (undoScript); it does so even when the
// caller's ctx has ended. A node that answered "held by another" or
// "stale", or that was never sent the request, holds nothing of it. It
// waits for the deletions until ctx ends, not longer: then it returns an
// error (the acquire's outcome is unknown) and the deletions go on in the
// background. Else it returns, per node, nil where the undo was confirmed
// or not needed, and the undo's error where it was not confirmed.
func (b *Backend) undo(ctx context.Context, key string, owner backend.Owner, px int64, a attempt, rs []nodeReply, undoable func(nodeReply) bool) ([]error, error) {
	undone := make([]error, len(rs))
	if !slices.ContainsFunc(rs, undoable) {
		return undone, nil
	}
	keys, args := b.undoCall(key, owner, px, a)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.each(context.Background(), b.nodeTimeout, func(ctx context.Context, i int, n *node) {
			if undoable(rs[i]) {
				undone[i] = n.p.Do(ctx, undoLua, keys, args...).Err()
			}
		})
	}()
	select {
	case <-done:
		return undone, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("undoing a partial grant: %w", backend.ContextEnded(ctx))
	}
}

// mayHold: the node may hold the acquire's lease (granted, or sent with no
// reply).
func mayHold(r nodeReply) bool {
	return r.ok || (r.err != nil && !r.notSent && !r.stale)
}

// madeHere: the node granted the acquire afresh: the lease there is this
// call's own.
func madeHere(r nodeReply) bool { return r.ok && !r.yours && r.err == nil }

// Renew implements backend.Leases: extends on every node, succeeds on a
// quorum within the validity.
func (b *Backend) Renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	return b.g.Renew(ctx, req, b.renew)
}

func (b *Backend) renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	key, owner, token, ttl := req.Key, req.Owner, req.Token, req.TTL
	ttl = time.Duration(ceilMS(ttl)) * time.Millisecond
	px := ceilMS(ttl + drift(ttl))
	start := time.Now()
	var ok, lost int
	var errs nodeErrors
	keys, args := b.renewCall(key, owner, token, px)
	for i, c := range b.onAll(ctx, b.nodeTimeout, renewLua, keys, args...) {
		v, err := c.Int()
		errs.add(i, err)
		switch {
		case err != nil:
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
	if lost > len(b.nodes)-b.quorum {
		return backend.Grant{}, fmt.Errorf("%w: key %q, token %d: renewed on %d of %d nodes, quorum %d", backend.ErrLeaseLost, key, token, ok, len(b.nodes), b.quorum)
	}
	if ok >= b.quorum {
		// A quorum renewed, but its replies came after the renewed TTL's
		// validity: the lease may be live on those nodes or may have just
		// ended there. No node said it was gone, so "lost" would be a
		// guess; the outcome is unknown.
		return backend.Grant{}, fmt.Errorf("renewed on %d of %d nodes, quorum %d, but the replies took %v, past the validity of a %v TTL: outcome unknown", ok, len(b.nodes), b.quorum, time.Since(start).Round(time.Millisecond), ttl)
	}
	return backend.Grant{}, fmt.Errorf("renewed on %d of %d nodes, quorum %d: %w", ok, len(b.nodes), b.quorum, errs.err())
}

// Release implements backend.Leases: deletes the owner's lease on every
// node (each publishes the release). The counters are kept.
func (b *Backend) Release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	return b.g.Release(ctx, key, owner, token, b.release)
}

func (b *Backend) release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	var exact int
	var errs nodeErrors
	keys, args := b.releaseCall(key, owner, token)
	for i, c := range b.onAll(ctx, max(10*b.nodeTimeout, time.Second), releaseLua, keys, args...) {
		v, err := c.Int()
		errs.add(i, err)
		if err == nil && v == 1 {
			exact++
		}
	}
	switch {
	case exact >= b.quorum:
		return nil
	case errs.first != nil:
		return fmt.Errorf("released on %d of %d nodes: %w", exact, len(b.nodes), errs.err())
	}
	return backend.ErrLeaseLost
}

// Get implements backend.Leases: the lease held with the same value on a
// quorum of nodes, with the time a quorum still holds it.
func (b *Backend) Get(ctx context.Context, key string) (backend.Lease, error) {
	return b.g.Get(ctx, key, b.get)
}

func (b *Backend) get(ctx context.Context, key string) (backend.Lease, error) {
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
		return backend.Lease{}, firstEr
	}
	return backend.Lease{}, backend.ErrNotFound
}

// List implements backend.Leases: the union of the nodes' lease keys, each
// read with Get (no snapshot).
func (b *Backend) List(ctx context.Context, prefix string, limit int) ([]backend.Lease, error) {
	return b.g.List(ctx, prefix, limit, b.list)
}

func (b *Backend) list(ctx context.Context, prefix string, limit int) ([]backend.Lease, error) {
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
		if err := b.gate.Check(); err != nil { // as each Get's own check did
			return nil, err
		}
		l, err := b.get(ctx, name)
		if errors.Is(err, backend.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get key %q: %w", name, err)
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
