package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// Fault and refusal cases of the group commit (see batch_test.go for the
// helpers).

// testBatchConnectionLost: the connection is cut just before a batch is
// sent. Every member gets an unknown outcome — an error that is neither
// "held" nor ErrNotApplied — and nothing reached etcd.
func testBatchConnectionLost(t *testing.T, addr string) {
	p, err := chaos.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	direct := openBatch(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := OpenConfig(ctx, Config{Endpoints: []string{p.Addr()}, Prefix: direct.prefix, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sending, proceed := make(chan int, 1), make(chan struct{})
	b.acq.beforeSend = func(batch []*txnReq) { sending <- len(batch); <-proceed }
	keys := []string{"cut-0", "cut-1", "cut-2"}
	send := hold(t, b.acq)
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() {
			actx, acancel := context.WithTimeout(ctx, 3*time.Second)
			defer acancel()
			_, errs[i] = b.Acquire(actx, k, owners(1)[0], batchTTL)
		})
	}
	waitQueued(t, b.acq, len(keys))
	send()
	if n := <-sending; n != len(keys) {
		t.Fatalf("batch of %d, want %d", n, len(keys))
	}
	p.SetRefuse(true)
	p.CloseConns()
	close(proceed)
	wg.Wait()
	for i, err := range errs {
		var held *backend.HeldError
		if err == nil || errors.Is(err, backend.ErrNotApplied) || errors.As(err, &held) {
			t.Errorf("acquire %s over a cut connection: %v, want an unknown outcome", keys[i], err)
		}
	}
	for _, k := range keys {
		if _, err := direct.Get(ctx, k); !errors.Is(err, backend.ErrNotFound) {
			t.Errorf("get %s: %v, want ErrNotFound (nothing was sent)", k, err)
		}
	}
}

// testBatchClose: requests queued when the backend is closed get ErrClosed
// (and ErrNotApplied: none was sent); the members of a batch in flight get
// an unknown outcome — not ErrClosed, which says nothing happened (issue 14
// item 6); requests after Close get ErrClosed; no batch goroutine is left.
func testBatchClose(t *testing.T, addr string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, inflight := range []bool{false, true} {
		b := openBatch(t, addr)
		sending := make(chan int, 1)
		if inflight {
			b.acq.beforeSend = func(batch []*txnReq) { sending <- len(batch); <-b.acq.base.Done() }
		}
		send := hold(t, b.acq)
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() { _, errs[i] = b.Acquire(ctx, fmt.Sprintf("close-%d", i), owners(1)[0], batchTTL) })
		}
		waitQueued(t, b.acq, len(errs))
		if inflight {
			send()
			<-sending
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for i, err := range errs {
			if err == nil || errors.Is(err, backend.ErrClosed) == inflight || errors.Is(err, backend.ErrNotApplied) == inflight {
				t.Errorf("in flight %v: acquire %d at Close: %v, want ErrClosed and ErrNotApplied %v", inflight, i, err, !inflight)
			}
		}
		if _, err := b.Acquire(ctx, "after", owners(1)[0], batchTTL); !errors.Is(err, backend.ErrClosed) {
			t.Errorf("acquire after Close: %v, want ErrClosed", err)
		}
		if err := b.Release(ctx, "after", owners(1)[0], 1); !errors.Is(err, backend.ErrClosed) {
			t.Errorf("release after Close: %v, want ErrClosed", err)
		}
		if !inflight {
			send() // the hold's end: nothing is sent after Close
		}
		// A batch goroutine may be on its way out as Close returns (CI saw
		// one runnable at its last take, which finds the batcher closed);
		// one that is still there after 5 s outlived Close.
		buf := make([]byte, 1<<20)
		var st string
		if !eventually.Within(5*time.Second, func() bool {
			st = string(buf[:runtime.Stack(buf, true)])
			return !strings.Contains(st, "(*batcher).run")
		}) {
			t.Fatalf("a batch goroutine outlived Close by 5 s:\n%s", st)
		}
	}
}

// testBatchStress: 48 goroutines acquire and release 6 keys, some with
// contexts that end at random moments (queued, in flight or never), and
// learn the outcome of unknown ones by retrying with the same nonce. The
// grants must exclude each other per key and their tokens must grow per
// key.
func testBatchStress(t *testing.T, addr string) {
	b := openBatch(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		mu     sync.Mutex
		holder = map[string]backend.Owner{}
		last   = map[string]uint64{}
		grants int
	)
	acqSizes, relSizes := record(t, b.acq), record(t, b.rel)
	enter := func(key string, o backend.Owner, tok uint64) {
		mu.Lock()
		defer mu.Unlock()
		if h, ok := holder[key]; ok {
			t.Errorf("%s granted to %v (token %d) while %v holds it", key, o, tok, h)
		}
		if tok <= last[key] {
			t.Errorf("%s: token %d after %d", key, tok, last[key])
		}
		holder[key], last[key] = o, tok
		grants++
	}
	leave := func(key string) { mu.Lock(); delete(holder, key); mu.Unlock() }
	var wg sync.WaitGroup
	for w := range 48 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range 15 {
				key := fmt.Sprintf("stress-%d", rng.IntN(6))
				o := backend.Owner{Instance: fmt.Sprintf("w%d", w), Nonce: backend.NewNonce()}
				actx, acancel := ctx, context.CancelFunc(func() {})
				if rng.IntN(3) == 0 {
					actx, acancel = context.WithTimeout(ctx, time.Duration(rng.IntN(3000))*time.Microsecond)
				}
				g, err := b.Acquire(actx, key, o, batchTTL)
				acancel()
				var held *backend.HeldError
				switch {
				case errors.As(err, &held), errors.Is(err, backend.ErrNotApplied):
					continue
				case err != nil:
					// Unknown outcome: the retry with the same nonce tells.
					g, err = b.Acquire(ctx, key, o, batchTTL)
					if errors.As(err, &held) {
						continue
					}
					if err != nil {
						t.Errorf("retry of acquire %s: %v", key, err)
						return
					}
				}
				enter(key, o, g.Token)
				time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond) // the work
				leave(key)
				if err := b.Release(ctx, key, o, g.Token); err != nil {
					t.Errorf("release %s: %v", key, err)
					return
				}
			}
		})
	}
	wg.Wait()
	as, rs := acqSizes.get(), relSizes.get()
	t.Logf("%d grants; %d acquire and %d release batches (sizes %v / %v)", grants, len(as), len(rs), as, rs)
}

// testBatchLeaseGone: one member's lease is gone, which makes etcd refuse
// the whole batch unapplied; each member is then sent alone and decided on
// its own (the one with the lost lease gets ErrLeaseNotFound, which
// Acquire answers by granting a new lease).
func testBatchLeaseGone(t *testing.T, addr string) {
	b := openBatch(t, addr)
	acqSizes := record(t, b.acq)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	good, err := b.c.Grant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := b.c.Grant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.Revoke(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	o := owners(2)
	send := hold(t, b.acq)
	type txnRes struct {
		resp *clientv3.TxnResponse
		err  error
	}
	rc := make([]chan txnRes, 2)
	for i, id := range []clientv3.LeaseID{good.ID, gone.ID} {
		rc[i] = make(chan txnRes, 1)
		go func() {
			resp, err := b.acquireTxn(ctx, fmt.Sprintf("lease-%d", i), o[i], id)
			rc[i] <- txnRes{resp, err}
		}()
	}
	waitQueued(t, b.acq, 2)
	send()
	if r := <-rc[0]; r.err != nil || !r.resp.Succeeded {
		t.Fatalf("member with a live lease: %v", r.err)
	}
	if r := <-rc[1]; !errors.Is(r.err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("member with a revoked lease: %v, want ErrLeaseNotFound", r.err)
	}
	waitIdle(t, b.acq)
	// Through Acquire: a revoked lease in the pool, taken by one of two
	// batched requests; both are granted.
	secs := ttlSeconds(batchTTL)
	b.pool.put(secs, pooled{id: gone.ID, ttl: secs + leaseSlack, req: secs, fresh: time.Now()})
	res := acquireAll(t, b, []string{"pool-a", "pool-b"}, owners(2))
	for i, r := range res {
		if r.err != nil {
			t.Fatalf("acquire %d with a revoked lease in the pool: %v", i, r.err)
		}
	}
	// The refused batches; a re-grant after the lease was found gone may
	// have queued behind the second (then it went alone in a batch of 1).
	if s := acqSizes.get(); len(s) < 2 || s[0] != 2 || s[1] != 2 || slices.ContainsFunc(s[2:], func(n int) bool { return n > 1 }) {
		t.Fatalf("batch sizes %v, want [2 2] and batches of 1", s)
	}
}

// TestBatchMaxTxnOps checks how etcd counts a nested Txn's operations
// against --max-txn-ops (here 8): a batch of n acquire Txns (3 operations
// in their longest branch) passes while 3 ≤ 8 − n, so 5 pass and 6 are
// refused unapplied; the batcher then sends each member alone, halves its
// bound, and later batches fit.
func TestBatchMaxTxnOps(t *testing.T) {
	srv := testserver.Etcd(t, "--max-txn-ops", "8")
	b := openBatch(t, srv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nested := func(n int) error {
		ops := make([]clientv3.Op, n)
		for i := range ops {
			k := fmt.Sprintf("%sraw%d-%d", b.prefix, n, i)
			ops[i] = clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
				[]clientv3.Op{clientv3.OpGet(k + "c"), clientv3.OpPut(k, "v"), clientv3.OpPut(k+"c", "")},
				[]clientv3.Op{clientv3.OpGet(k)})
		}
		_, err := b.c.Txn(ctx).Then(ops...).Commit()
		return err
	}
	if err := nested(5); err != nil {
		t.Fatalf("5 nested Txns at --max-txn-ops 8: %v", err)
	}
	if err := nested(6); !errors.Is(err, rpctypes.ErrTooManyOps) {
		t.Fatalf("6 nested Txns at --max-txn-ops 8: %v, want ErrTooManyOps", err)
	}
	acqSizes := record(t, b.acq)
	for round, want := range [][]int{{10}, {10, 5, 5}} {
		keys := make([]string, 10)
		for i := range keys {
			keys[i] = fmt.Sprintf("ops%d-%d", round, i)
		}
		for i, r := range acquireAll(t, b, keys, owners(len(keys))) {
			if r.err != nil {
				t.Fatalf("round %d: acquire %s: %v", round, keys[i], r.err)
			}
		}
		if s := acqSizes.get(); !slices.Equal(s, want) {
			t.Fatalf("round %d: batch sizes %v, want %v", round, s, want)
		}
	}
}
