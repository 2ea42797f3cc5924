// Package memory is the in-process reference backend: leases and the run
// ledger in maps under one mutex, expiry judged by the process's monotonic
// clock. It is for tests and single-process programs; nothing survives the
// process, so its tokens are safe (strictly increasing) but not durable.
package memory

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/guard"
)

// MinTTL is the shortest lease the memory backend grants.
const MinTTL = time.Millisecond

// Backend is the memory backend. The zero value is not usable; call New.
type Backend struct {
	g        guard.Guard // checks, the closed state, failure names
	mu       sync.Mutex
	closed   atomic.Bool // set under mu
	leases   map[string]*lease
	counters map[string]uint64 // per key; never deleted
	waiters  map[string][]chan struct{}
	jobs     map[string]*job
	runs     map[runKey]*run
	records  map[string]map[int64]backend.Record // name → seq → record
	now      func() time.Time                    // monotonic-bearing wall clock (time.Now)
}

type lease struct {
	owner   backend.Owner
	token   uint64
	expires time.Time // carries a monotonic reading
}

type job struct {
	counter     uint64
	high        time.Time
	highVersion string
}

type runKey struct {
	job string
	at  int64 // UnixMilli
}

type run struct {
	rec     backend.Run
	expires time.Time // runner's lease, monotonic
}

var (
	_ backend.Backend  = (*Backend)(nil)
	_ backend.Notifier = (*Backend)(nil)
)

// Open returns an empty memory backend for the URL "memory://" (or
// "memory:"; the scheme in any case), the form backend/open knows; any host,
// path, user, query or fragment is refused with an error wrapping
// backend.ErrInvalid. ctx is not used: nothing is connected. It is New for
// a program that takes its backend as a URL.
func Open(_ context.Context, rawURL string) (*Backend, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: memory url is not a valid URL", backend.ErrInvalid)
	}
	if !strings.EqualFold(u.Scheme, "memory") {
		return nil, fmt.Errorf("%w: memory url %q: scheme %q is not memory", backend.ErrInvalid, u.Redacted(), u.Scheme)
	}
	if u.User != nil || u.Host != "" || u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: backend URL %q: memory:// takes no host, path or parameters", backend.ErrInvalid, u.Redacted())
	}
	return New(), nil
}

// New returns an empty memory backend.
func New() *Backend {
	b := &Backend{
		leases:   map[string]*lease{},
		counters: map[string]uint64{},
		waiters:  map[string][]chan struct{}{},
		jobs:     map[string]*job{},
		runs:     map[runKey]*run{},
		records:  map[string]map[int64]backend.Record{},
		now:      time.Now,
	}
	// Closed is read again under mu by each step (lock): a call that
	// passed the guard as Close ran still finds it closed.
	b.g = guard.Guard{Name: "memory", MinTTL: MinTTL, Closed: func() error {
		if b.closed.Load() {
			return backend.ErrClosed
		}
		return nil
	}}
	return b
}

// Capabilities: safe fencing within the process's life, no durability.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Name:        "memory",
		ServerClock: true, // one process, one monotonic clock
		SafeFencing: true,
		PushEvents:  true,
		MinTTL:      MinTTL,
	}
}

// Close marks the backend closed; later calls fail with ErrClosed.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed.Store(true)
	for k := range b.waiters {
		b.wakeLocked(k)
	}
	return nil
}

func (b *Backend) lock() error {
	b.mu.Lock()
	if b.closed.Load() {
		b.mu.Unlock()
		return backend.ErrClosed
	}
	return nil
}

// live returns the unexpired lease on key, deleting an expired one.
func (b *Backend) live(key string, now time.Time) *lease {
	l := b.leases[key]
	if l != nil && !now.Before(l.expires) {
		delete(b.leases, key)
		b.wakeLocked(key)
		return nil
	}
	return l
}

// Acquire implements backend.Leases.
func (b *Backend) Acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	return b.g.Acquire(ctx, key, owner, ttl, b.acquire)
}

func (b *Backend) acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	if ctx.Err() != nil {
		return backend.Grant{}, backend.NotSent(ctx)
	}
	if err := b.lock(); err != nil {
		return backend.Grant{}, err
	}
	defer b.mu.Unlock()
	now := b.now()
	if l := b.live(key, now); l != nil {
		if l.owner == owner { // a retry of a request that was applied: renew it
			l.expires = now.Add(ttl)
			return backend.Grant{Token: l.token, TTL: ttl}, nil
		}
		return backend.Grant{}, &backend.HeldError{Holder: b.leaseView(key, l, now)}
	}
	b.counters[key]++
	t := b.counters[key]
	b.leases[key] = &lease{owner: owner, token: t, expires: now.Add(ttl)}
	return backend.Grant{Token: t, TTL: ttl}, nil
}

// Renew implements backend.Leases.
func (b *Backend) Renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	return b.g.Renew(ctx, req, b.renew)
}

func (b *Backend) renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	key, owner, token, ttl := req.Key, req.Owner, req.Token, req.TTL
	if ctx.Err() != nil {
		return backend.Grant{}, backend.NotSent(ctx)
	}
	if err := b.lock(); err != nil {
		return backend.Grant{}, err
	}
	defer b.mu.Unlock()
	now := b.now()
	l := b.live(key, now)
	if l == nil || l.owner != owner || l.token != token {
		return backend.Grant{}, backend.ErrLeaseLost
	}
	l.expires = now.Add(ttl)
	return backend.Grant{Token: token, TTL: ttl}, nil
}

// Release implements backend.Leases.
func (b *Backend) Release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	return b.g.Release(ctx, key, owner, token, b.release)
}

func (b *Backend) release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	if ctx.Err() != nil {
		return backend.NotSent(ctx)
	}
	if err := b.lock(); err != nil {
		return err
	}
	defer b.mu.Unlock()
	l := b.live(key, b.now())
	if l == nil || l.owner != owner || l.token != token {
		return backend.ErrLeaseLost
	}
	delete(b.leases, key)
	b.wakeLocked(key)
	return nil
}

// Get implements backend.Leases.
func (b *Backend) Get(ctx context.Context, key string) (backend.Lease, error) {
	return b.g.Get(ctx, key, b.get)
}

func (b *Backend) get(ctx context.Context, key string) (backend.Lease, error) {
	if err := b.lock(); err != nil {
		return backend.Lease{}, err
	}
	defer b.mu.Unlock()
	now := b.now()
	l := b.live(key, now)
	if l == nil {
		return backend.Lease{}, backend.ErrNotFound
	}
	return b.leaseView(key, l, now), nil
}

// List implements backend.Leases.
func (b *Backend) List(ctx context.Context, prefix string, limit int) ([]backend.Lease, error) {
	return b.g.List(ctx, prefix, limit, b.list)
}

func (b *Backend) list(ctx context.Context, prefix string, limit int) ([]backend.Lease, error) {
	if err := b.lock(); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	now := b.now()
	var out []backend.Lease
	for k := range b.leases {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if l := b.live(k, now); l != nil {
			out = append(out, b.leaseView(k, l, now))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (b *Backend) leaseView(key string, l *lease, now time.Time) backend.Lease {
	return backend.Lease{Key: key, Owner: l.owner, Token: l.token, Remaining: l.expires.Sub(now)}
}

// Wait implements backend.Notifier: the channel closes when key is released
// or its current lease expires.
func (b *Backend) Wait(ctx context.Context, key string) (<-chan struct{}, error) {
	return b.g.Wait(ctx, key, b.wait)
}

func (b *Backend) wait(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := b.lock(); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	ch := make(chan struct{})
	now := b.now()
	l := b.live(key, now)
	if l == nil {
		close(ch)
		return ch, nil
	}
	b.waiters[key] = append(b.waiters[key], ch)
	// Expiry is not an event in a map; a timer turns it into one.
	t := time.AfterFunc(l.expires.Sub(now), func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.live(key, b.now())
		b.dropWaiter(key, ch)
	})
	go func() {
		select {
		case <-ch:
		case <-ctx.Done():
			b.mu.Lock()
			b.dropWaiter(key, ch)
			b.mu.Unlock()
		}
		t.Stop()
	}()
	return ch, nil
}

// dropWaiter closes ch if it is still registered for key.
func (b *Backend) dropWaiter(key string, ch chan struct{}) {
	ws := b.waiters[key]
	for i, w := range ws {
		if w == ch {
			close(ch)
			b.waiters[key] = append(ws[:i], ws[i+1:]...)
			if len(b.waiters[key]) == 0 {
				delete(b.waiters, key)
			}
			return
		}
	}
}

func (b *Backend) wakeLocked(key string) {
	for _, ch := range b.waiters[key] {
		close(ch)
	}
	delete(b.waiters, key)
}
