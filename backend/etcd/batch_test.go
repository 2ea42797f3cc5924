package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// Tests of the group commit (batch.go) on real etcd servers. A batch is
// made deterministic by holding the batcher busy (as if a Txn were in
// flight) until the requests under test have queued; beforeSend records
// the batch sizes and, where a test needs it, holds a batch just before
// it is sent.

const batchTTL = 10 * time.Second // no test here waits for an expiry

var batchPrefixes atomic.Int64

func openBatch(t *testing.T, addr string) *Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := OpenConfig(ctx, Config{Endpoints: []string{addr}, Prefix: fmt.Sprintf("batch%d/", batchPrefixes.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// hold makes q busy, as if its most Txns were in flight, so requests
// queue; the returned func ends the hold and sends what queued, batch after
// batch (as one in-flight Txn returning would).
func hold(t *testing.T, q *batcher) func() {
	t.Helper()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.inflight != 0 {
		t.Fatalf("%s batcher already busy", q.what)
	}
	q.inflight = maxInflight
	return func() {
		q.mu.Lock()
		q.inflight = 1
		q.mu.Unlock()
		q.next()
	}
}

// waitQueued waits until n requests are queued in q.
func waitQueued(t *testing.T, q *batcher, n int) {
	t.Helper()
	var l int
	if !eventually.Within(30*time.Second, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		l = len(q.queue)
		return l == n
	}) {
		t.Fatalf("%d %s requests queued after 30s, want %d", l, q.what, n)
	}
}

// waitIdle waits until q has nothing in flight.
func waitIdle(t *testing.T, q *batcher) {
	t.Helper()
	if !eventually.Within(30*time.Second, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.inflight == 0
	}) {
		t.Fatalf("%s batcher still busy after 30s", q.what)
	}
}

// sizes records the size of every batch q sends, and fails the test for a
// batch that holds a lock key twice. Set before q is used.
type sizes struct {
	mu sync.Mutex
	n  []int
}

func record(t *testing.T, q *batcher) *sizes {
	s := &sizes{}
	q.beforeSend = func(batch []*txnReq) {
		keys := map[string]bool{}
		for _, r := range batch {
			if keys[r.key] {
				t.Errorf("a batch holds %s twice", r.key)
			}
			keys[r.key] = true
		}
		s.mu.Lock()
		s.n = append(s.n, len(batch))
		s.mu.Unlock()
	}
	return s
}

func (s *sizes) get() []int { s.mu.Lock(); defer s.mu.Unlock(); return slices.Clone(s.n) }

type acqResult struct {
	g   backend.Grant
	err error
}

// acquireAll runs b.Acquire(keys[i], owners[i]) for every i at once, while
// the acquire batcher is held until all have queued; so they go as batches.
func acquireAll(t *testing.T, b *Backend, keys []string, owners []backend.Owner) []acqResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	send := hold(t, b.acq)
	out := make([]acqResult, len(keys))
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			g, err := b.Acquire(ctx, keys[i], owners[i], batchTTL)
			out[i] = acqResult{g, err}
		})
	}
	waitQueued(t, b.acq, len(keys))
	send()
	wg.Wait()
	waitIdle(t, b.acq)
	return out
}

// releaseAll releases every grant at once, as batches.
func releaseAll(t *testing.T, b *Backend, keys []string, owners []backend.Owner, tokens []uint64) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	send := hold(t, b.rel)
	out := make([]error, len(keys))
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() { out[i] = b.Release(ctx, keys[i], owners[i], tokens[i]) })
	}
	waitQueued(t, b.rel, len(keys))
	send()
	wg.Wait()
	waitIdle(t, b.rel)
	return out
}

func owners(n int) []backend.Owner {
	o := make([]backend.Owner, n)
	for i := range o {
		o[i] = backend.Owner{Instance: fmt.Sprintf("o%d", i), Nonce: backend.NewNonce()}
	}
	return o
}

func TestBatch(t *testing.T) {
	srv := testserver.Etcd(t)
	t.Run("bound", func(t *testing.T) { testBatchBound(t, srv.Addr()) })
	t.Run("alone", func(t *testing.T) { testBatchAlone(t, srv.Addr()) })
	t.Run("queued-context", func(t *testing.T) { testBatchQueuedContext(t, srv.Addr()) })
	t.Run("inflight-context", func(t *testing.T) { testBatchInflightContext(t, srv.Addr()) })
	t.Run("lease-gone", func(t *testing.T) { testBatchLeaseGone(t, srv.Addr()) })
	t.Run("connection-lost", func(t *testing.T) { testBatchConnectionLost(t, srv.Addr()) })
	t.Run("close", func(t *testing.T) { testBatchClose(t, srv.Addr()) })
	t.Run("stress", func(t *testing.T) { testBatchStress(t, srv.Addr()) })
}

// testBatchBound: maxBatch+3 keys plus two more requests on the first key
// queue at once. The first batch is full (maxBatch requests on distinct
// keys: etcd 3.4 takes it at its default --max-txn-ops), the second
// request on a key waits for a later batch and is answered "held by" the
// winner; each key's counter records the token; keys granted together
// share the batch's token, and the fence still tells them apart; a retry
// with the same nonce answers "yours" with the same token; releases batch
// too; the next grants' tokens are greater.
func testBatchBound(t *testing.T, addr string) {
	b := openBatch(t, addr)
	ctx := context.Background()
	acqSizes, relSizes := record(t, b.acq), record(t, b.rel)
	const n = maxBatch + 3
	keys := make([]string, n+2)
	for i := range n {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	keys[n], keys[n+1] = keys[0], keys[0]
	own := owners(n + 2)
	res := acquireAll(t, b, keys, own)

	s := acqSizes.get()
	if len(s) < 2 || s[0] != maxBatch || sum(s) != n+2 || slices.Max(s) > maxBatch {
		t.Fatalf("batch sizes %v: want a first batch of %d, none larger, %d requests in all", s, maxBatch, n+2)
	}
	// Key k00: exactly one of its three requests won; the others name it.
	var win = -1
	for _, i := range []int{0, n, n + 1} {
		if res[i].err == nil {
			if win >= 0 {
				t.Fatalf("two grants on %s: requests %d and %d", keys[0], win, i)
			}
			win = i
		}
	}
	if win < 0 {
		t.Fatalf("no grant on %s: %v %v %v", keys[0], res[0].err, res[n].err, res[n+1].err)
	}
	for _, i := range []int{0, n, n + 1} {
		var held *backend.HeldError
		if i != win && (!errors.As(res[i].err, &held) || held.Holder.Owner != own[win] || held.Holder.Token != res[win].g.Token) {
			t.Fatalf("request %d on %s: %v, want held by %v token %d", i, keys[0], res[i].err, own[win], res[win].g.Token)
		}
	}
	// Every other key granted; its counter key was written by the grant.
	byToken := map[uint64][]int{}
	wkeys, wown, tokens := []string{}, []backend.Owner{}, []uint64{}
	for i := range n {
		j := i
		if i == 0 {
			j = win
		}
		if res[j].err != nil {
			t.Fatalf("acquire %s: %v", keys[j], res[j].err)
		}
		tok := res[j].g.Token
		c, err := b.c.Get(ctx, b.counterKey(keys[j]))
		if err != nil || len(c.Kvs) != 1 || uint64(c.Kvs[0].ModRevision) != tok {
			t.Fatalf("counter of %s: %v %v, want mod revision %d", keys[j], c, err, tok)
		}
		byToken[tok] = append(byToken[tok], j)
		wkeys, wown, tokens = append(wkeys, keys[j]), append(wown, own[j]), append(tokens, tok)
	}
	if len(byToken) > len(s) {
		t.Fatalf("%d distinct tokens from %d batches", len(byToken), len(s))
	}
	// A retry with the same nonce answers "yours", batched as well.
	again := acquireAll(t, b, wkeys, wown)
	for i, r := range again {
		if r.err != nil || r.g.Token != tokens[i] {
			t.Fatalf("retry of %s: %v token %d, want token %d", wkeys[i], r.err, r.g.Token, tokens[i])
		}
	}
	// Two keys with one token: the fence compares each key's own grant.
	var pair []int
	for _, js := range byToken {
		if len(js) >= 2 {
			pair = js[:2]
			break
		}
	}
	if pair == nil {
		t.Fatalf("no two keys share a token: %v", byToken)
	}
	a, z := pair[0], pair[1]
	tok := res[a].g.Token
	if err := b.Release(ctx, keys[a], own[a], tok); err != nil {
		t.Fatal(err)
	}
	if err := b.FencedPut(ctx, keys[a], tok, b.prefix+"sink", "x"); !errors.Is(err, backend.ErrLeaseLost) {
		t.Fatalf("fenced put on released %s with token %d: %v, want ErrLeaseLost", keys[a], tok, err)
	}
	if err := b.FencedPut(ctx, keys[z], tok, b.prefix+"sink", "y"); err != nil {
		t.Fatalf("fenced put on held %s with token %d: %v", keys[z], tok, err)
	}
	// Release the rest together, then acquire again: greater tokens.
	var rk []string
	var ro []backend.Owner
	var rt []uint64
	for i, k := range wkeys {
		if k != keys[a] {
			rk, ro, rt = append(rk, k), append(ro, wown[i]), append(rt, tokens[i])
		}
	}
	for i, err := range releaseAll(t, b, rk, ro, rt) {
		if err != nil {
			t.Fatalf("release %s: %v", rk[i], err)
		}
	}
	if rs := relSizes.get(); slices.Max(rs) < 2 {
		t.Fatalf("release batch sizes %v: no batch", rs)
	}
	for _, k := range wkeys {
		if _, err := b.Get(ctx, k); !errors.Is(err, backend.ErrNotFound) {
			t.Fatalf("get %s after release: %v", k, err)
		}
	}
	next := acquireAll(t, b, wkeys, owners(len(wkeys)))
	for i, r := range next {
		if r.err != nil || r.g.Token <= tokens[i] {
			t.Fatalf("next grant on %s: %v token %d, want above %d", wkeys[i], r.err, r.g.Token, tokens[i])
		}
	}
}

func sum(s []int) (n int) {
	for _, x := range s {
		n += x
	}
	return n
}

// testBatchAlone: one goroutine's requests never queue and never go
// through a batch goroutine: each is sent alone at once; so is a request
// that finds fewer than maxInflight Txns in flight.
func testBatchAlone(t *testing.T, addr string) {
	b := openBatch(t, addr)
	acqSizes, relSizes := record(t, b.acq), record(t, b.rel)
	ctx := context.Background()
	o := owners(1)[0]
	for _, q := range []*batcher{b.acq, b.rel} {
		q.mu.Lock()
		q.inflight = maxInflight - 1
		q.mu.Unlock()
	}
	g, err := b.Acquire(ctx, "solo", o, batchTTL)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "solo", o, g.Token); err != nil {
		t.Fatal(err)
	}
	for _, q := range []*batcher{b.acq, b.rel} {
		q.mu.Lock()
		if q.inflight != maxInflight-1 || len(q.queue) != 0 {
			t.Fatalf("%s: %d in flight, %d queued after a request alone", q.what, q.inflight, len(q.queue))
		}
		q.inflight = 0
		q.mu.Unlock()
	}
	for range 5 {
		g, err := b.Acquire(ctx, "solo", o, batchTTL)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, "solo", o, g.Token); err != nil {
			t.Fatal(err)
		}
	}
	if a, r := acqSizes.get(), relSizes.get(); len(a)+len(r) != 0 {
		t.Fatalf("batches %v / %v from one goroutine, want none", a, r)
	}
}

// testBatchQueuedContext: a request whose context ends while it is queued,
// or before it is made, returns ErrNotApplied and changes nothing; its
// lease goes back to the pool.
func testBatchQueuedContext(t *testing.T, addr string) {
	b := openBatch(t, addr)
	acqSizes := record(t, b.acq)
	o := owners(2)
	for _, sendAtOnce := range []bool{false, true} {
		key := fmt.Sprintf("queued-%v", sendAtOnce)
		send := hold(t, b.acq)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { _, err := b.Acquire(ctx, key, o[0], batchTTL); errc <- err }()
		waitQueued(t, b.acq, 1)
		cancel()
		if sendAtOnce {
			send() // races with the request leaving the queue: either way it was not sent
		}
		if err := <-errc; !errors.Is(err, backend.ErrNotApplied) {
			t.Fatalf("acquire cancelled while queued: %v, want ErrNotApplied", err)
		}
		if !sendAtOnce {
			waitQueued(t, b.acq, 0)
			send()
		}
		waitIdle(t, b.acq)
		if _, err := b.Get(context.Background(), key); !errors.Is(err, backend.ErrNotFound) {
			t.Fatalf("get %s: %v, want ErrNotFound", key, err)
		}
	}
	if s := acqSizes.get(); len(s) != 0 {
		t.Fatalf("batches %v sent, want none", s)
	}
	b.pool.mu.Lock()
	idle := len(b.pool.free[ttlSeconds(batchTTL)])
	b.pool.mu.Unlock()
	if idle != 1 {
		t.Fatalf("%d idle leases in the pool, want the one granted for the unsent requests", idle)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Acquire(done, "queued-done", o[1], batchTTL); !errors.Is(err, backend.ErrNotApplied) {
		t.Fatalf("acquire with an ended context: %v, want ErrNotApplied", err)
	}
	if err := b.Release(done, "queued-done", o[1], 1); !errors.Is(err, backend.ErrNotApplied) {
		t.Fatalf("release with an ended context: %v, want ErrNotApplied", err)
	}
}

// testBatchInflightContext: a member whose context ends while its batch is
// in flight gets an unknown outcome (not ErrNotApplied, not "held"); the
// batch is not cancelled by it, so the other member is granted, and the
// cancelled member's retry with the same nonce finds its grant.
func testBatchInflightContext(t *testing.T, addr string) {
	b := openBatch(t, addr)
	sending, proceed := make(chan int, 1), make(chan struct{})
	b.acq.beforeSend = func(batch []*txnReq) { sending <- len(batch); <-proceed }
	o := owners(2)
	send := hold(t, b.acq)
	actx, cancelA := context.WithCancel(context.Background())
	bctx, cancelB := context.WithTimeout(context.Background(), time.Minute)
	defer cancelB()
	errA := make(chan error, 1)
	resB := make(chan acqResult, 1)
	go func() { _, err := b.Acquire(actx, "inflight-a", o[0], batchTTL); errA <- err }()
	go func() { g, err := b.Acquire(bctx, "inflight-b", o[1], batchTTL); resB <- acqResult{g, err} }()
	waitQueued(t, b.acq, 2)
	send()
	if n := <-sending; n != 2 {
		t.Fatalf("batch of %d, want 2", n)
	}
	cancelA()
	err := <-errA
	var held *backend.HeldError
	if err == nil || errors.Is(err, backend.ErrNotApplied) || errors.As(err, &held) {
		t.Fatalf("acquire cancelled in flight: %v, want an unknown outcome", err)
	}
	close(proceed)
	rb := <-resB
	if rb.err != nil {
		t.Fatalf("the other member: %v", rb.err)
	}
	g, err := b.Acquire(bctx, "inflight-a", o[0], batchTTL)
	if err != nil || g.Token != rb.g.Token {
		t.Fatalf("retry of the cancelled member: %v token %d, want its grant with token %d", err, g.Token, rb.g.Token)
	}
}
