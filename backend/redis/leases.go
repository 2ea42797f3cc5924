package redis

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

// value is the stored form of a lease: "token:nonce:instance".
func value(token uint64, o backend.Owner) string {
	return strconv.FormatUint(token, 10) + ":" + o.Nonce.String() + ":" + o.Instance
}

// parseValue reads a stored lease value.
func parseValue(key, v string) (backend.Lease, error) {
	tok, rest, ok1 := strings.Cut(v, ":")
	nonce, inst, ok2 := strings.Cut(rest, ":")
	t, err := strconv.ParseUint(tok, 10, 64)
	n, nerr := backend.ParseNonce(nonce)
	if !ok1 || !ok2 || err != nil || nerr != nil {
		return backend.Lease{}, fmt.Errorf("lease %q has malformed value %q", key, v)
	}
	return backend.Lease{Key: key, Owner: backend.Owner{Instance: inst, Nonce: n}, Token: t}, nil
}

// Acquire implements backend.Leases: one round trip (acquireScript).
func (b *Backend) Acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	return b.g.Acquire(ctx, key, owner, ttl, b.acquire)
}

func (b *Backend) acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	ms := ttlMS(ttl)
	res, err := b.pipe.Do(ctx, acquireLua, []string{b.leaseKey(key), b.tokenKey(key)},
		owner.Nonce.String(), owner.Instance, ms).Slice()
	if err != nil {
		return backend.Grant{}, err
	}
	granted := time.Duration(ms) * time.Millisecond
	if len(res) == 2 && toInt(res[0]) == 1 {
		t, err := toUint(res[1])
		if err != nil {
			return backend.Grant{}, fmt.Errorf("token %v: %w", res[1], err)
		}
		return backend.Grant{Token: t, TTL: granted}, nil
	}
	if len(res) != 3 {
		return backend.Grant{}, fmt.Errorf("unexpected reply %v", res)
	}
	l, err := parseValue(key, fmt.Sprint(res[1]))
	if err != nil {
		return backend.Grant{}, err
	}
	l.Remaining = time.Duration(toInt(res[2])) * time.Millisecond
	return backend.Grant{}, &backend.HeldError{Holder: l}
}

// Renew implements backend.Leases: one round trip (renewScript).
func (b *Backend) Renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	return b.g.Renew(ctx, req, b.renew)
}

func (b *Backend) renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	key, owner, token, ttl := req.Key, req.Owner, req.Token, req.TTL
	ms := ttlMS(ttl)
	n, err := b.pipe.Do(ctx, renewLua, []string{b.leaseKey(key)}, value(token, owner), ms).Int64()
	if err != nil {
		return backend.Grant{}, err
	}
	if n != 1 {
		return backend.Grant{}, backend.ErrLeaseLost
	}
	return backend.Grant{Token: token, TTL: time.Duration(ms) * time.Millisecond}, nil
}

// Release implements backend.Leases: one round trip (releaseScript), which
// also publishes the release to waiters. The token counter is kept.
func (b *Backend) Release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	return b.g.Release(ctx, key, owner, token, b.release)
}

func (b *Backend) release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	n, err := b.pipe.Do(ctx, releaseLua, []string{b.leaseKey(key)}, value(token, owner), b.channel(key)).Int64()
	if err != nil {
		return err
	}
	if n != 1 {
		return backend.ErrLeaseLost
	}
	return nil
}

// Get implements backend.Leases.
func (b *Backend) Get(ctx context.Context, key string) (backend.Lease, error) {
	return b.g.Get(ctx, key, b.get)
}

func (b *Backend) get(ctx context.Context, key string) (backend.Lease, error) {
	res, err := b.pipe.Do(ctx, getLua, []string{b.leaseKey(key)}).Slice()
	if errors.Is(err, goredis.Nil) {
		return backend.Lease{}, backend.ErrNotFound
	}
	if err != nil {
		return backend.Lease{}, err
	}
	if len(res) != 2 {
		return backend.Lease{}, fmt.Errorf("unexpected reply %v", res)
	}
	l, err := parseValue(key, fmt.Sprint(res[0]))
	if err != nil {
		return backend.Lease{}, err
	}
	l.Remaining = time.Duration(toInt(res[1])) * time.Millisecond
	return l, nil
}

// List implements backend.Leases. It SCANs every primary for the prefix's
// lease keys, then reads each (not one atomic snapshot: a lease can expire
// or be granted while List runs).
func (b *Backend) List(ctx context.Context, prefix string, limit int) ([]backend.Lease, error) {
	return b.g.List(ctx, prefix, limit, b.list)
}

func (b *Backend) list(ctx context.Context, prefix string, limit int) ([]backend.Lease, error) {
	match := globEscape(b.prefix) + "lease:{" + globEscape(prefix) + "*"
	var (
		mu    sync.Mutex
		names []string
	)
	scan := func(ctx context.Context, c goredis.Cmdable) error {
		it := c.Scan(ctx, 0, match, 1000).Iterator()
		for it.Next(ctx) {
			k := it.Val()
			if !strings.HasSuffix(k, "}") {
				continue
			}
			if name := b.keyOfLease(k); strings.HasPrefix(name, prefix) {
				mu.Lock()
				names = append(names, name)
				mu.Unlock()
			}
		}
		return it.Err()
	}
	var err error
	if c, ok := b.c.(*goredis.ClusterClient); ok {
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error { return scan(ctx, n) })
	} else {
		err = scan(ctx, b.c)
	}
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	names = slices.Compact(names)
	var out []backend.Lease
	for len(names) > 0 && (limit <= 0 || len(out) < limit) {
		batch := names[:min(len(names), 256)]
		names = names[len(batch):]
		pipe := b.c.Pipeline()
		gets := make([]*goredis.StringCmd, len(batch))
		ttls := make([]*goredis.DurationCmd, len(batch))
		for i, name := range batch {
			gets[i] = pipe.Get(ctx, b.leaseKey(name))
			ttls[i] = pipe.PTTL(ctx, b.leaseKey(name))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
			return nil, err
		}
		for i, name := range batch {
			v, err := gets[i].Result()
			if err != nil || ttls[i].Val() <= 0 {
				continue // expired or released meanwhile
			}
			l, err := parseValue(name, v)
			if err != nil {
				return nil, err
			}
			l.Remaining = ttls[i].Val()
			out = append(out, l)
			if limit > 0 && len(out) == limit {
				break
			}
		}
	}
	return out, nil
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

func toUint(v any) (uint64, error) {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return 0, fmt.Errorf("negative")
		}
		return uint64(x), nil
	case string:
		return strconv.ParseUint(x, 10, 64)
	}
	return 0, fmt.Errorf("unexpected type %T", v)
}
