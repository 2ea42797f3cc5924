// Package redispipe is the group commit of the Redis backends: the Lua
// script calls of a backend queue in one Pipe, and a few lanes each send
// everything queued as ONE pipeline of EVALSHA calls on a connection, read
// every reply themselves and hand each caller its own. A burst of n
// requests costs about n/MaxBatch round trips instead of n.
//
// Why the lanes read the replies, not the callers: go-redis closes a pooled
// connection whose read was cut short by the caller's context (the reply
// may still come and would be read by the next user), so a crowd of
// short-deadline requests used to close and re-dial connection after
// connection, and collapsed. A lane sends and reads on its own context
// (bounded by the client's read timeout, ended by Close, and ended when
// every caller of its batch has stopped waiting), so a caller whose context
// ends just stops waiting and the connection stays healthy; a batch nobody
// waits for any more no longer holds a lane, and is not retried.
//
// What a caller is told when its context ends:
//
//   - still queued (no lane took it): the request was never sent; the
//     error wraps backend.ErrNotApplied and the context's cause;
//   - taken into a batch that is being sent: the outcome is unknown; the
//     error wraps the context's cause only (not ErrNotApplied).
//
// A reply that arrived before the caller looked wins over "unknown".
// A batch is sent at most once: go-redis's own retries (MaxRetries) are
// off for the lanes' pipelines (see once), so a call is never applied
// again after its caller stopped waiting.
//
// One exception to the lanes: a request whose context can never end
// (Done is nil) that finds nothing in flight is sent by its caller (see
// alone), so that a lone caller pays no hand-over; the requests that
// arrive meanwhile queue for the lanes as usual. A context that can end
// goes through a lane even when alone: go-redis does not cut a blocked
// read short when the context ends (it waits for the read timeout), so a
// caller that sent its request itself would be held past its context by
// a server that does not answer.
//
// On a Cluster (*goredis.ClusterClient) the calls are grouped by node:
// each call goes to the queue of the primary that serves its first key's
// hash slot, and that node's lanes batch it as above (see cluster.go for
// MOVED and ASK). A Pipe over anything else (a Ring, a wrapper) runs each
// call as before (Script.Run on the caller's context).
//
// With WaitReplicas (see NewWith) a lane ends each pipeline with WAIT, on
// the same connection, and a call whose writes the replicas did not all
// confirm in time is answered "outcome unknown" (see wait.go).
package redispipe

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
)

// DefaultLanes is how many pipelines of one Pipe may be in flight at once.
// One lane would make two concurrent callers wait a round trip for each
// other; with a few, a lone caller never waits behind a batch and a burst
// still goes out in large batches.
const DefaultLanes = 4

// DefaultMaxBatch bounds the calls of one pipeline, so that a burst is
// split over the lanes (the server answers one batch while the next is
// on the wire) and the first caller of a batch does not wait for thousands
// of replies.
const DefaultMaxBatch = 256

// defaultTimeout bounds one batch's round trip when the client has no read
// timeout of its own.
const defaultTimeout = 3 * time.Second

type state = uint32

const (
	queued  state = iota
	taken         // in a batch being sent: its outcome is the batch's
	dropped       // answered without being sent
)

type request struct {
	ctx    context.Context
	script *goredis.Script
	keys   []string
	args   []any

	done  chan *goredis.Cmd // buffered: exactly one answer
	state atomic.Uint32     // a state: queued → taken by a lane, or → dropped by the caller or Close
}

// Pipe queues script calls for one client. The zero value is not usable;
// create one with New.
type Pipe struct {
	c       goredis.UniversalClient
	batched bool
	lanes   int
	max     int
	timeout time.Duration

	mu       sync.Mutex
	queue    []*request
	inflight int
	closed   bool

	base   context.Context // every lane's context: cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// Batch, if set, sends even a lone request through a lane (tests of
	// the lanes; see alone). Set it before the first call.
	Batch bool

	opts Options

	// cluster is set on a Cluster client: calls go to the Pipe of the node
	// that serves their slot (nodes, guarded by mu).
	cluster *goredis.ClusterClient
	nodes   map[*goredis.Client]*Pipe

	// BeforeSend, if set, is called by a lane with the size of each batch
	// before the batch is sent (tests: stage a caller whose context ends
	// mid-batch, or hold the lanes while a burst queues). Set it before
	// the first call.
	BeforeSend func(n int)
}

// New returns a Pipe over c without options. Calls are batched when c is a
// *goredis.Client (a single node, or a Sentinel-managed primary) or, grouped
// by node, a *goredis.ClusterClient.
func New(c goredis.UniversalClient) *Pipe {
	p, _ := NewWith(c, Options{})
	return p
}

// NewWith returns a Pipe over c with opts (validated: an error wraps
// backend.ErrInvalid). Calls are batched when c is a *goredis.Client or,
// grouped by node, a *goredis.ClusterClient.
func NewWith(c goredis.UniversalClient, opts Options) (*Pipe, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pipe{c: c, lanes: DefaultLanes, max: DefaultMaxBatch, timeout: defaultTimeout, base: ctx, cancel: cancel, opts: opts}
	if cc, ok := c.(*goredis.ClusterClient); ok {
		p.batched, p.cluster, p.nodes = true, cc, map[*goredis.Client]*Pipe{}
	}
	if cc, ok := c.(*goredis.Client); ok {
		p.batched = true
		if rt := cc.Options().ReadTimeout; rt > 0 {
			p.timeout = rt + max(cc.Options().WriteTimeout, 0)
		}
	}
	p.timeout += opts.WaitTimeout // WAIT holds the connection that long at most
	return p, nil
}

// Batched reports whether calls go through the lanes.
func (p *Pipe) Batched() bool { return p.batched }

// Queued returns how many requests wait for a lane (tests).
func (p *Pipe) Queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, sub := range p.nodes {
		n += sub.Queued()
	}
	for _, r := range p.queue {
		if r.state.Load() == queued {
			n++
		}
	}
	return n
}

// NotSent is the error of a request that never left the queue.
func NotSent(ctx context.Context) error {
	return fmt.Errorf("not sent: %w", backend.NotSent(ctx))
}

// notSentClosed is the error of a request Close kept from being sent, or
// made after Close.
func notSentClosed() error {
	return fmt.Errorf("not sent: %w: %w", backend.ErrNotApplied, backend.ErrClosed)
}

func failed(err error) *goredis.Cmd {
	c := goredis.NewCmd(context.Background())
	c.SetErr(err)
	return c
}

// soloSend reports whether a lone request may be sent by its caller, with
// no hand-over to a lane: only when nothing batches (Batch), no WAIT
// follows the grant, and ctx can never end — a caller blocked in go-redis's
// read would otherwise return only at its ReadTimeout, past its context.
func soloSend(ctx context.Context, p *Pipe) bool {
	return !p.Batch && p.opts.WaitReplicas == 0 && ctx.Done() == nil
}

// Do runs script with keys and args and returns its reply as a Cmd (read it
// with Slice, Int64, ...). It returns when the reply is in or when ctx ends,
// whichever comes first; see the package doc for the errors.
func (p *Pipe) Do(ctx context.Context, script *goredis.Script, keys []string, args ...any) *goredis.Cmd {
	if !p.batched {
		return script.Run(ctx, p.c, keys, args...)
	}
	if p.cluster != nil {
		return p.viaNode(ctx, script, keys, args, false).Wait()
	}
	return p.start(ctx, script, keys, args, soloSend(ctx, p)).Wait()
}

// Pending is a request started by Start.
type Pending struct {
	r   *request
	cmd *goredis.Cmd // answered at once

	// sub is the node's Pending of a call on a Cluster, and after judges
	// its reply (MOVED, ASK: cluster.go).
	sub   *Pending
	after func(*goredis.Cmd) *goredis.Cmd
}

// Start queues the call (always for a lane: a caller that starts calls on
// several pipes must not send one of them itself) and returns at once;
// Wait returns its reply as Do would.
func (p *Pipe) Start(ctx context.Context, script *goredis.Script, keys []string, args ...any) *Pending {
	if !p.batched {
		done := make(chan *goredis.Cmd, 1)
		go func() { done <- script.Run(ctx, p.c, keys, args...) }()
		r := &request{ctx: ctx, done: done}
		r.state.Store(taken)
		return &Pending{r: r}
	}
	if p.cluster != nil {
		return p.viaNode(ctx, script, keys, args, true)
	}
	return p.start(ctx, script, keys, args, false)
}

func (p *Pipe) start(ctx context.Context, script *goredis.Script, keys []string, args []any, alone bool) *Pending {
	if ctx.Err() != nil {
		return &Pending{cmd: failed(NotSent(ctx))}
	}
	r := &request{ctx: ctx, script: script, keys: keys, args: args, done: make(chan *goredis.Cmd, 1)}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return &Pending{cmd: failed(notSentClosed())}
	}
	if alone && p.inflight == 0 {
		return &Pending{cmd: p.alone(r)}
	}
	p.queue = append(p.queue, r)
	if p.inflight < p.lanes {
		p.inflight++
		p.wg.Add(1)
		go p.lane()
	}
	p.mu.Unlock()
	return &Pending{r: r}
}

// Wait returns the reply when it is in, or when the request's context ends.
func (w *Pending) Wait() *goredis.Cmd {
	if w.sub != nil {
		return w.after(w.sub.Wait())
	}
	if w.cmd != nil {
		return w.cmd
	}
	r, ctx := w.r, w.r.ctx
	select {
	case c := <-r.done:
		return c
	case <-ctx.Done():
	}
	// No lock here: a crowd's deadlines end together, and thousands of
	// callers queueing for the Pipe's mutex at once would keep the lanes
	// from it. A request left in the queue is skipped by take.
	if r.state.CompareAndSwap(queued, dropped) {
		return failed(NotSent(ctx))
	}
	if r.state.Load() == dropped {
		return <-r.done // Close answered it, never sent
	}
	select {
	case c := <-r.done: // answered meanwhile: an answer beats "unknown"
		return c
	default:
		return failed(fmt.Errorf("sent in a pipeline, no reply before the context ended: %w", backend.ContextEnded(ctx)))
	}
}

// laneState is one lane's, guarded by Pipe.mu.
type laneState struct {
	sending  bool // a batch is out
	detached bool // no longer counted in inflight: exits after this batch
}

// alone sends r on the caller's own context, as a plain script call,
// when nothing else is in flight and r's context can never end: a lone
// caller pays no hand-over to a lane and back (two goroutine wake-ups,
// which cost more than the round trip itself on a busy host). It holds a
// lane's place meanwhile, so requests that arrive queue as usual, and a
// lane takes them when it returns. Only one request is ever in flight
// this way. Called with p.mu held; unlocks it.
func (p *Pipe) alone(r *request) *goredis.Cmd {
	p.inflight++
	p.mu.Unlock()
	if p.BeforeSend != nil {
		p.BeforeSend(1)
	}
	c := r.script.Run(r.ctx, p.c, r.keys, r.args...)
	p.mu.Lock()
	if !p.closed && len(p.queue) > 0 {
		p.wg.Add(1)
		go p.lane() // keeps the place
	} else {
		p.inflight--
	}
	p.mu.Unlock()
	return c
}

// lane sends batches until the queue is empty.
func (p *Pipe) lane() {
	defer p.wg.Done()
	l := &laneState{}
	for {
		p.mu.Lock()
		batch, latest := p.take()
		if batch == nil {
			p.inflight--
			p.mu.Unlock()
			return
		}
		l.sending = true
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(p.base, p.timeout)
		var stop func() bool
		if !latest.IsZero() {
			stop = time.AfterFunc(time.Until(latest), func() {
				p.detach(l)
				cancel()
			}).Stop
		}
		p.send(ctx, batch)
		if stop != nil {
			stop()
		}
		cancel()
		p.mu.Lock()
		l.sending = false
		if l.detached {
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

// detach runs when every member of l's batch has stopped waiting (their
// deadlines passed) while the batch is still out: the lane's connection is
// slow or gone, so it stops counting against the lanes and another lane
// takes what is queued. The lane's round trip is then cancelled: nobody
// waits for its replies, and go-redis must not retry the batch on a new
// connection (it would apply requests whose callers already reported them
// unknown, later than need be). go-redis closes the connection.
func (p *Pipe) detach(l *laneState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !l.sending || l.detached {
		return
	}
	l.detached = true
	p.inflight--
	if !p.closed && len(p.queue) > 0 && p.inflight < p.lanes {
		p.inflight++
		p.wg.Add(1)
		go p.lane()
	}
}

// take removes the next batch from the queue, in arrival order. Requests
// whose context ended are answered "not sent". It also returns the latest
// deadline of the batch's members (zero when one has none). Called with
// p.mu held.
func (p *Pipe) take() ([]*request, time.Time) {
	if p.closed {
		return nil, time.Time{}
	}
	var (
		batch   []*request
		latest  time.Time
		unbound bool
	)
	i := 0
	for ; i < len(p.queue) && len(batch) < p.max; i++ {
		r := p.queue[i]
		p.queue[i] = nil
		switch {
		case r.ctx.Err() != nil:
			// Its caller drops it (Pending.Wait), if it has not already.
		case !r.state.CompareAndSwap(queued, taken):
			// Dropped by its caller.
		default:
			batch = append(batch, r)
			if d, ok := r.ctx.Deadline(); !ok {
				unbound = true
			} else if d.After(latest) {
				latest = d
			}
		}
	}
	p.queue = p.queue[i:]
	if len(p.queue) == 0 {
		p.queue = nil // let the backing array go after a burst
	}
	if unbound {
		latest = time.Time{}
	}
	return batch, latest
}

// send runs one batch as a pipeline on ctx (bounded by the client's read
// timeout, cancelled by Close and by detach) and answers its members.
func (p *Pipe) send(ctx context.Context, batch []*request) {
	if p.BeforeSend != nil {
		p.BeforeSend(len(batch))
	}
	cmds := make([]*goredis.Cmd, len(batch))
	pipe := p.c.Pipeline()
	for i, r := range batch {
		cmds[i] = once(ctx, pipe, r, r.script.EvalSha)
	}
	p.waitReplicas(ctx, pipe, cmds) // every cmd carries its own error
	var again []int
	for i, c := range cmds {
		if err := c.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, i) // not run: safe to send again
		}
	}
	if len(again) > 0 {
		pipe = p.c.Pipeline()
		var retried []*goredis.Cmd
		for _, i := range again {
			r := batch[i]
			cmds[i] = once(ctx, pipe, r, r.script.Eval)
			retried = append(retried, cmds[i])
		}
		p.waitReplicas(ctx, pipe, retried)
	}
	for i, r := range batch {
		r.done <- cmds[i]
	}
}

// once queues r's script call on pipe as a command go-redis sends at most
// once. go-redis resends a whole pipeline (MaxRetries) on a new connection
// after a read timeout or a dropped connection, including the calls the
// server already ran, and at a time a member whose context ended has
// already been told "unknown" and gone on: its call would be applied after
// it (a Redlock undo deleting the same owner's later grant, a retry
// overtaken by its first attempt). A pipeline holding a command whose
// NoRetry is true is never resent; its failure reaches every member.
// call is Script.EvalSha or Script.Eval; it builds the command on a
// recorder, so the script's source and digest stay go-redis's.
func once(ctx context.Context, pipe goredis.Pipeliner, r *request, call func(context.Context, goredis.Scripter, []string, ...any) *goredis.Cmd) *goredis.Cmd {
	var rec recorder
	cmd := call(ctx, &rec, r.keys, r.args...)
	_ = pipe.Process(ctx, noRetry{cmd})
	return cmd
}

// noRetry is a command go-redis must not resend.
type noRetry struct{ *goredis.Cmd }

func (noRetry) NoRetry() bool { return true }

// recorder is a goredis.Scripter that only builds the commands it is
// asked for (sent by the caller through a pipeline).
type recorder struct{}

func evalArgs(name, script string, keys []string, args []any) []any {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return append(a, args...)
}

// evalCmd is the command go-redis's own Eval family builds.
func evalCmd(ctx context.Context, name, script string, keys []string, args []any) *goredis.Cmd {
	c := goredis.NewCmd(ctx, evalArgs(name, script, keys, args)...)
	if len(keys) > 0 {
		c.SetFirstKeyPos(3)
	}
	return c
}

func (recorder) Eval(ctx context.Context, script string, keys []string, args ...any) *goredis.Cmd {
	return evalCmd(ctx, "eval", script, keys, args)
}

func (recorder) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *goredis.Cmd {
	return evalCmd(ctx, "evalsha", sha1, keys, args)
}

func (recorder) EvalRO(ctx context.Context, script string, keys []string, args ...any) *goredis.Cmd {
	return evalCmd(ctx, "eval_ro", script, keys, args)
}

func (recorder) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *goredis.Cmd {
	return evalCmd(ctx, "evalsha_ro", sha1, keys, args)
}

func (recorder) ScriptExists(ctx context.Context, hashes ...string) *goredis.BoolSliceCmd {
	c := goredis.NewBoolSliceCmd(ctx)
	c.SetErr(errNotSent)
	return c
}

func (recorder) ScriptLoad(ctx context.Context, script string) *goredis.StringCmd {
	c := goredis.NewStringCmd(ctx)
	c.SetErr(errNotSent)
	return c
}

var errNotSent = fmt.Errorf("redispipe: script not loaded by the recorder: %w", backend.ErrNotApplied)

// Close answers every queued request ErrClosed (never sent), ends the
// lanes' round trips and waits for the lanes to exit. Later calls fail
// with ErrClosed, never sent (ErrNotApplied) too.
func (p *Pipe) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	for _, r := range p.queue {
		if r.state.CompareAndSwap(queued, dropped) {
			r.done <- failed(notSentClosed())
		}
	}
	p.queue = nil
	nodes := p.nodes
	p.nodes = nil
	p.mu.Unlock()
	for _, sub := range nodes {
		sub.Close()
	}
	p.cancel()
	p.wg.Wait()
}
