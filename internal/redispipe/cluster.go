package redispipe

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
)

// Group commit on a Cluster. Each call goes to the Pipe of the primary
// that serves its first key's hash slot (every key of one call shares a
// slot: leasehold's keys carry one hash tag), as go-redis's slot map says;
// that node's lanes batch it with the other calls for the node and send
// each batch as one pipeline on one of the node's connections. A slow or
// dead node holds only its own calls.
//
// The slot map can be stale: the slot moved (a resharding, a failover).
// The node then answers MOVED, ASK, TRYAGAIN or CLUSTERDOWN instead of
// running the script, so the call was not applied. On MOVED the call is
// sent once more, to the node the answer names, as soon as go-redis's
// reloaded slot map agrees (waiting at most redirectWait for the map). On
// ASK (the slot is migrating and the old owner does not hold the call's
// keys) it is sent once more to the importing node the answer names,
// after ASKING on the same connection, as Redis Cluster's specification
// asks of a client. Neither is a blind resend, since the node that
// answered ran nothing; a call follows at most MaxRedirects of them.
// Otherwise (TRYAGAIN, CLUSTERDOWN, a map that does not catch up, an ASK
// target that is no primary go-redis knows) the caller is told "not
// applied" (the error wraps backend.ErrNotApplied and the server's answer)
// and decides; the Locker retries such a call. A batch or a redirected
// call that got no reply is never resent: its members' outcomes are
// unknown, as on one node.

// MaxRedirects bounds how many MOVED and ASK answers one call follows.
const MaxRedirects = 3

// redirectWait bounds the wait for the slot map to name a MOVED target.
const redirectWait = 2 * time.Second

// viaNode queues the call on the Pipe of the node that serves keys[0];
// forLane keeps the caller from sending it itself (Start).
func (p *Pipe) viaNode(ctx context.Context, script *goredis.Script, keys []string, args []any, forLane bool) *Pending {
	return p.viaNodeN(ctx, script, keys, args, forLane, 0)
}

// viaNodeN is viaNode for a call that already followed redirects MOVEDs.
func (p *Pipe) viaNodeN(ctx context.Context, script *goredis.Script, keys []string, args []any, forLane bool, redirects int) *Pending {
	if len(keys) == 0 {
		// No slot to route by: go-redis picks the node.
		return &Pending{cmd: script.Run(ctx, p.c, keys, args...)}
	}
	nc, err := p.cluster.MasterForKey(ctx, keys[0])
	if err != nil {
		return &Pending{cmd: failed(fmt.Errorf("redispipe: find the node that serves %q: not sent: %w: %w", keys[0], backend.ErrNotApplied, err))}
	}
	sub := p.node(nc)
	if sub == nil {
		return &Pending{cmd: failed(notSentClosed())}
	}
	var w *Pending
	if forLane {
		w = sub.Start(ctx, script, keys, args...)
	} else {
		w = sub.start(ctx, script, keys, args, soloSend(ctx, sub))
	}
	return &Pending{sub: w, after: func(c *goredis.Cmd) *goredis.Cmd {
		return p.follow(ctx, c, script, keys, args, redirects)
	}}
}

// follow judges a node's reply c to the call, first following a MOVED or
// ASK answer (which ran nothing) while redirects < MaxRedirects.
func (p *Pipe) follow(ctx context.Context, c *goredis.Cmd, script *goredis.Script, keys []string, args []any, redirects int) *goredis.Cmd {
	if redirects < MaxRedirects {
		if target, ok := redirectedTo(c.Err(), "MOVED"); ok && p.routesTo(ctx, keys[0], target) {
			return p.viaNodeN(ctx, script, keys, args, false, redirects+1).Wait()
		}
		if target, ok := redirectedTo(c.Err(), "ASK"); ok {
			if nc := p.primary(ctx, target); nc != nil {
				return p.follow(ctx, p.asking(ctx, nc, script, keys, args), script, keys, args, redirects+1)
			}
		}
	}
	return p.judge(c)
}

// asking sends the call alone to nc, the node importing its slot, after
// ASKING on the same connection (a pipeline is one connection), sent at
// most once and bounded as a lane's batch is (the client's read timeout,
// Close) and by ctx.
func (p *Pipe) asking(ctx context.Context, nc *goredis.Client, script *goredis.Script, keys []string, args []any) *goredis.Cmd {
	sub := p.node(nc)
	if sub == nil {
		return failed(notSentClosed())
	}
	bound, cancel := context.WithTimeout(sub.base, sub.timeout)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	if sub.BeforeSend != nil {
		sub.BeforeSend(1)
	}
	pipe := nc.Pipeline()
	_ = pipe.Process(bound, noRetry{goredis.NewCmd(bound, "asking")})
	c := once(bound, pipe, &request{keys: keys, args: args}, script.Eval)
	sub.waitReplicas(bound, pipe, []*goredis.Cmd{c})
	return c
}

// primary returns go-redis's client of the primary at addr, or nil if its
// slot map names no such primary.
func (p *Pipe) primary(ctx context.Context, addr string) *goredis.Client {
	var (
		mu    sync.Mutex
		found *goredis.Client
	)
	_ = p.cluster.ForEachMaster(ctx, func(_ context.Context, nc *goredis.Client) error {
		if nc.Options().Addr == addr {
			mu.Lock()
			found = nc
			mu.Unlock()
		}
		return nil
	})
	return found
}

// redirectedTo returns the address a MOVED or ASK answer (kind) names.
func redirectedTo(err error, kind string) (string, bool) {
	if err == nil || !goredis.HasErrorPrefix(err, kind) {
		return "", false
	}
	f := strings.Fields(err.Error())
	if len(f) < 3 {
		return "", false
	}
	return f[len(f)-1], true
}

// routesTo has go-redis reload its slot map and reports whether it names
// target as key's primary within redirectWait (and ctx).
func (p *Pipe) routesTo(ctx context.Context, key, target string) bool {
	deadline := time.Now().Add(redirectWait)
	for {
		p.cluster.ReloadState(ctx)
		if nc, err := p.cluster.MasterForKey(ctx, key); err == nil && nc.Options().Addr == target {
			return true
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// node returns the Pipe of the node client nc, made on first use; nil
// after Close.
func (p *Pipe) node(nc *goredis.Client) *Pipe {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	sub := p.nodes[nc]
	if sub == nil {
		sub, _ = NewWith(nc, p.opts) // validated by p's NewWith; MapError for the node's WAIT (wait.go)
		sub.Batch, sub.BeforeSend, sub.lanes, sub.max = p.Batch, p.BeforeSend, p.lanes, p.max
		p.nodes[nc] = sub
	}
	return sub
}

// Nodes returns how many nodes the Pipe has sent calls to (tests).
func (p *Pipe) Nodes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.nodes)
}

// redirected lists the answers of a Cluster node that ran nothing: the
// slot is served elsewhere (MOVED, ASK), is being migrated with the keys
// split (TRYAGAIN), or the Cluster is down (CLUSTERDOWN).
var redirected = []string{"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN"}

// judge turns a node's answer that ran nothing into "not applied" (and
// has go-redis reload the slot map), and applies Options.MapError, since
// hooks on the Cluster client do not see the nodes' own replies.
func (p *Pipe) judge(c *goredis.Cmd) *goredis.Cmd {
	err := c.Err()
	if err == nil {
		return c
	}
	for _, prefix := range redirected {
		if goredis.HasErrorPrefix(err, prefix) {
			p.cluster.ReloadState(context.Background())
			c.SetErr(fmt.Errorf("redispipe: the node ran nothing (%s), the call is not sent again: %w: %w", prefix, backend.ErrNotApplied, err))
			return c
		}
	}
	if p.opts.MapError != nil {
		if m := p.opts.MapError(err); m != nil {
			c.SetErr(m)
		}
	}
	return c
}
