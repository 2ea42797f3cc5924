package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/backend"
)

// Group commit of the lock Txns. At many goroutines etcd's CPU is the limit,
// and each write Txn costs it a Raft entry, a share of an fsync and (etcd
// 3.4) a copy of the uncommitted write buffer for its compares, whatever
// the Txn holds. So the acquire Txns of a backend go through one batcher and
// the release Txns through another: while maxInflight Txns of the kind are
// in flight, later requests queue; when one returns, the queued ones (at
// most maxBatch) go as ONE Txn without compares whose Then holds one nested Txn
// (clientv3.OpTxn, etcd ≥ 3.3) per request. Each nested Txn keeps its
// request's own If/Then/Else, so each request is decided exactly as it is
// alone: etcd evaluates every compare of a Txn, nested ones included, on
// the state before the Txn, and a batch never holds two requests on one
// lock key (so none sees another's writes; etcd would refuse a Txn that
// puts one key twice anyway). A request that finds a free slot and nothing
// queued is sent at once, alone, as a plain Txn on its own context, as
// before batching: one goroutine pays no latency.
//
// Every write of a batch gets the batch's revision, so keys granted in one
// batch share a token. Tokens are scoped to a key (each still strictly
// increases per key), the counter-key tripwire still compares each key's
// own counter, and a fenced write still compares the create revision of
// its own key.
//
// Contexts. A request whose context ends while it is queued is dropped and
// gets an error wrapping backend.ErrNotApplied. Once its batch is taken for
// sending, the outcome of a request whose context ends is unknown, as for
// a Txn alone (a retry with the same nonce finds a grant that was made).
// The batch Txn is not cancelled by one member's context: it runs until
// every member's context has ended (so its deadline is the latest member
// deadline) or the backend is closed.
//
// Failures. A batch refused as a whole before it was applied — a lease of
// one member gone (checked for the whole Txn), too many operations or too
// large a request for the server's limits, no permission on one key —
// says nothing about the others: each member is then sent again alone on
// its own context (and the batch bound halves after a size refusal). Any
// other failure of the batch Txn (connection lost, leader lost, timeout)
// leaves every member's outcome unknown.

// maxBatch bounds the requests of one batch Txn. etcd (v3rpc
// checkTxnRequest; TestBatchMaxTxnOps shows it on 3.4.23) counts a Txn's
// operations as the longest of its compare, success and failure lists, at
// most --max-txn-ops (default 128), and gives each nested Txn the budget
// its parent left: a batch of n acquires (3 operations in the longest
// branch) needs n ≤ 128 and 3 ≤ 128 − n. 32 keeps far below, and one
// batch takes at most 32 × ~3.5 KiB (keys of 512 bytes under a 512-byte
// prefix), well under the 1.5 MiB default --max-request-bytes.
const maxBatch = 32

// maxInflight is how many Txns of a kind may be in flight before requests
// queue. With 1, two goroutines that acquire at once always wait a round
// trip for each other; with 2 they never do, and the batches at 64
// goroutines are still large: leasehold took 0.52–0.62 × the Mutex's time
// per pair on one node with 2, 0.37–0.45 × with 1 (3 or 4 gained nothing
// measurable between 2 and 8 goroutines and cost more at 64).
const maxInflight = 2

type reqState uint8

const (
	queued  reqState = iota
	taken            // in a batch being sent: its outcome is the batch's
	dropped          // answered without being sent
)

// txnReq is one request for a batcher: a Txn on one lock key.
type txnReq struct {
	ctx  context.Context
	key  string // a batch holds each lock key at most once
	cmps []clientv3.Cmp
	then []clientv3.Op
	els  []clientv3.Op

	done  chan txnResult // buffered: exactly one answer
	state reqState       // guarded by batcher.mu
}

type txnResult struct {
	resp  *clientv3.TxnResponse
	err   error
	alone bool // the batch was refused unapplied: send the request alone
}

// batcher groups the Txns of one kind (acquire or release).
type batcher struct {
	c    *clientv3.Client
	what string // for errors

	mu       sync.Mutex
	inflight int // Txns of this kind in flight (at most maxInflight)
	queue    []*txnReq
	max      int // requests per batch; 1: batching off
	closed   bool

	base   context.Context // every batch Txn's context: cancelled by close
	cancel context.CancelFunc
	wg     sync.WaitGroup // batch goroutines

	beforeSend func([]*txnReq) // tests: called before a batch of queued requests is sent
}

func newBatcher(c *clientv3.Client, what string) *batcher {
	ctx, cancel := context.WithCancel(context.Background())
	return &batcher{c: c, what: what, max: maxBatch, base: ctx, cancel: cancel}
}

func notApplied(ctx context.Context) error {
	return fmt.Errorf("not sent: %w", backend.NotSent(ctx))
}

// do runs r's Txn, alone or in a batch, and returns its answer as if it had
// been sent alone.
func (q *batcher) do(r *txnReq) (*clientv3.TxnResponse, error) {
	if r.ctx.Err() != nil {
		return nil, notApplied(r.ctx)
	}
	q.mu.Lock()
	switch {
	case q.closed:
		q.mu.Unlock()
		return nil, backend.ErrClosed
	case q.max <= 1:
		q.mu.Unlock()
		return q.alone(r.ctx, r)
	case q.inflight < maxInflight:
		q.inflight++
		q.mu.Unlock()
		resp, err := q.alone(r.ctx, r)
		q.next()
		return resp, err
	}
	r.done, r.state = make(chan txnResult, 1), queued
	q.queue = append(q.queue, r)
	q.mu.Unlock()
	select {
	case res := <-r.done:
		return q.result(r, res)
	case <-r.ctx.Done():
	}
	q.mu.Lock()
	if r.state == queued {
		q.queue = slices.DeleteFunc(q.queue, func(x *txnReq) bool { return x == r })
		r.state = dropped
		q.mu.Unlock()
		return nil, notApplied(r.ctx)
	}
	q.mu.Unlock()
	select {
	case res := <-r.done: // answered meanwhile: an answer beats "unknown"
		return q.result(r, res)
	default:
		return nil, fmt.Errorf("batched %s: %w", q.what, backend.ContextEnded(r.ctx))
	}
}

func (q *batcher) result(r *txnReq, res txnResult) (*clientv3.TxnResponse, error) {
	if !res.alone {
		return res.resp, res.err
	}
	if r.ctx.Err() != nil {
		return nil, notApplied(r.ctx) // the batch was not applied
	}
	return q.alone(r.ctx, r)
}

// alone sends r as a plain Txn on ctx.
func (q *batcher) alone(ctx context.Context, r *txnReq) (*clientv3.TxnResponse, error) {
	return q.c.Txn(ctx).If(r.cmps...).Then(r.then...).Else(r.els...).Commit()
}

// next is called when a Txn sent alone returned: its slot sends what
// queued meanwhile, or is freed.
func (q *batcher) next() {
	q.mu.Lock()
	defer q.mu.Unlock()
	batch := q.take()
	if batch == nil {
		q.inflight--
		return
	}
	q.wg.Add(1)
	go q.run(batch)
}

// run sends batches on one slot until the queue is empty.
func (q *batcher) run(batch []*txnReq) {
	defer q.wg.Done()
	for batch != nil {
		q.send(batch)
		q.mu.Lock()
		if batch = q.take(); batch == nil {
			q.inflight--
		}
		q.mu.Unlock()
	}
}

// take removes the next batch from the queue, in arrival order: at most
// q.max requests on distinct keys (a second request on a key waits for the
// next batch). Requests whose context ended are answered ErrNotApplied.
// Called with q.mu held.
func (q *batcher) take() []*txnReq {
	if q.closed {
		return nil
	}
	var batch []*txnReq
	rest := q.queue[:0]
	for _, r := range q.queue {
		switch {
		case r.ctx.Err() != nil:
			r.state = dropped
			r.done <- txnResult{err: notApplied(r.ctx)}
		case len(batch) < q.max && !slices.ContainsFunc(batch, func(x *txnReq) bool { return x.key == r.key }):
			r.state = taken
			batch = append(batch, r)
		default:
			rest = append(rest, r)
		}
	}
	clear(q.queue[len(rest):])
	q.queue = rest
	return batch
}

// send runs one batch Txn and answers its members.
func (q *batcher) send(batch []*txnReq) {
	if q.beforeSend != nil {
		q.beforeSend(batch)
	}
	ctx, stop := batchContext(q.base, batch)
	defer stop()
	if len(batch) == 1 {
		resp, err := q.alone(ctx, batch[0])
		batch[0].done <- txnResult{resp: resp, err: err}
		return
	}
	ops := make([]clientv3.Op, len(batch))
	for i, r := range batch {
		ops[i] = clientv3.OpTxn(r.cmps, r.then, r.els)
	}
	resp, err := q.c.Txn(ctx).Then(ops...).Commit()
	if err == nil && len(resp.Responses) != len(batch) {
		err = fmt.Errorf("etcd answered %d of %d nested Txns", len(resp.Responses), len(batch))
	}
	switch {
	case err == nil:
		for i, r := range batch {
			n := resp.Responses[i].GetResponseTxn()
			if n == nil {
				r.done <- txnResult{err: fmt.Errorf("batched %s: etcd answered no nested Txn", q.what)}
				continue
			}
			// The nested answer carries no header: the batch's revision is
			// the revision of each of its writes.
			r.done <- txnResult{resp: &clientv3.TxnResponse{Header: resp.Header, Succeeded: n.Succeeded, Responses: n.Responses}}
		}
	case refusedUnapplied(err):
		if errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge) {
			q.mu.Lock()
			q.max = min(q.max, max(len(batch)/2, 1))
			q.mu.Unlock()
		}
		for _, r := range batch {
			r.done <- txnResult{alone: true}
		}
	default:
		for _, r := range batch {
			r.done <- txnResult{err: fmt.Errorf("batch of %d %ss: %w", len(batch), q.what, err)}
		}
	}
}

// refusedUnapplied reports an error for which etcd refused the whole Txn
// before changing anything: request checks of the gRPC layer (too many
// operations, duplicate key, too large) and of the applier, which checks
// every lease and permission the Txn's taken branches need before it
// writes.
func refusedUnapplied(err error) bool {
	for _, e := range []error{rpctypes.ErrLeaseNotFound, rpctypes.ErrTooManyOps, rpctypes.ErrRequestTooLarge,
		rpctypes.ErrDuplicateKey, rpctypes.ErrPermissionDenied} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// batchContext is the context of a batch Txn: it ends when the backend is
// closed or when every member's context has ended (not before: the others
// still want the answer); its deadline is the latest member deadline when
// every member has one.
func batchContext(base context.Context, batch []*txnReq) (context.Context, func()) {
	ctx, cancel := context.WithCancel(base)
	var latest time.Time
	for _, r := range batch {
		d, ok := r.ctx.Deadline()
		if !ok {
			latest = time.Time{}
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	stopDeadline := context.CancelFunc(func() {})
	if !latest.IsZero() {
		ctx, stopDeadline = context.WithDeadline(ctx, latest)
	}
	var left atomic.Int32
	left.Store(int32(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, r := range batch {
		stops[i] = context.AfterFunc(r.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		stopDeadline()
		cancel()
	}
}

// close answers every queued request ErrClosed (none was sent), cancels a
// batch in flight and waits for the batch goroutines.
func (q *batcher) close() {
	q.mu.Lock()
	q.closed = true
	for _, r := range q.queue {
		r.state = dropped
		r.done <- txnResult{err: fmt.Errorf("%w: %w", backend.ErrClosed, backend.ErrNotApplied)}
	}
	q.queue = nil
	q.mu.Unlock()
	q.cancel()
	q.wg.Wait()
}
