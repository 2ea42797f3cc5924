// Package benchkit measures lock implementations the same way for the Go
// benchmarks in the bench/ module and for "leasehold-lab bench": uncontended
// acquire+release at a given number of goroutines, the crowd scenario
// (many goroutines, few keys, a short wait) and hand-over latency. It
// reports figures; it never judges them.
package benchkit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
)

// Pair is one implementation's acquire and release of key.
type Pair func(ctx context.Context, key string) error

// Result is what Uncontended measured.
type Result struct {
	Ops      int
	Elapsed  time.Duration
	P50, P99 time.Duration
	lat      []time.Duration // sorted
}

// Add sums two runs: operations and time add up, and the percentiles
// are those of both runs' latencies together.
func (r Result) Add(o Result) Result {
	s := Result{Ops: r.Ops + o.Ops, Elapsed: r.Elapsed + o.Elapsed, lat: slices.Concat(r.lat, o.lat)}
	slices.Sort(s.lat)
	s.P50, s.P99 = Percentile(s.lat, 0.50), Percentile(s.lat, 0.99)
	return s
}

// NsPerOp is the elapsed wall time per operation.
func (r Result) NsPerOp() float64 {
	if r.Ops == 0 {
		return 0
	}
	return float64(r.Elapsed.Nanoseconds()) / float64(r.Ops)
}

// Uncontended runs p on goroutines goroutines, each on its own key (so
// nobody waits for a lock), for about d, and returns the throughput and
// the per-operation latency percentiles. The first error stops the run.
func Uncontended(ctx context.Context, p Pair, goroutines int, d time.Duration) (Result, error) {
	if goroutines < 1 {
		return Result{}, fmt.Errorf("goroutines %d: must be at least 1", goroutines)
	}
	var (
		ops      atomic.Int64
		firstErr atomic.Pointer[error]
		mu       sync.Mutex
		lat      []time.Duration
		wg       sync.WaitGroup
	)
	stop := time.Now().Add(d)
	start := time.Now()
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "bench/k" + strconv.Itoa(g)
			var mine []time.Duration
			for time.Now().Before(stop) && firstErr.Load() == nil && ctx.Err() == nil {
				t0 := time.Now()
				if err := p(ctx, key); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					break
				}
				mine = append(mine, time.Since(t0))
				ops.Add(1)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	r := Result{Ops: int(ops.Load()), Elapsed: time.Since(start), lat: lat}
	slices.Sort(lat)
	r.P50, r.P99 = Percentile(lat, 0.50), Percentile(lat, 0.99)
	if e := firstErr.Load(); e != nil {
		return r, *e
	}
	return r, ctx.Err()
}

// Percentile returns the p-th percentile of sorted d (0 if empty).
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

// CrowdResult is what Crowd measured.
type CrowdResult struct {
	// Acquired: attempts that got the lock. NotAcquired: attempts whose
	// wait ran out while the key was held, or whose request was never sent
	// (NotSent counts those among them). Indeterminate: attempts whose
	// wait ran out while a request was in flight (it may have been
	// applied; the Locker released any such grant). Errors: anything else.
	Acquired, NotAcquired, NotSent, Indeterminate, Errors int
	FirstError                                            error
	P50, P99, P999                                        time.Duration
}

// Crowd starts n goroutines at once; goroutine i tries once to take key
// "crowd/k<i mod keys>" with lk.Acquire, waiting at most wait, and releases
// at once if it got it.
func Crowd(ctx context.Context, lk *leasehold.Locker, n, keys int, wait time.Duration) CrowdResult {
	var (
		mu  sync.Mutex
		r   CrowdResult
		lat = make([]time.Duration, 0, n)
		wg  sync.WaitGroup
	)
	start := make(chan struct{})
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			actx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			t0 := time.Now()
			l, err := lk.Acquire(actx, "crowd/k"+strconv.Itoa(g%keys))
			d := time.Since(t0)
			if err == nil {
				_ = l.Release(context.WithoutCancel(ctx))
			}
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, d)
			switch {
			case err == nil:
				r.Acquired++
			case errors.Is(err, leasehold.ErrOutcomeIndeterminate):
				r.Indeterminate++
			case errors.Is(err, backend.ErrNotApplied):
				r.NotAcquired++
				r.NotSent++
			case errors.Is(err, leasehold.ErrLockNotAcquired), errors.Is(err, context.DeadlineExceeded):
				r.NotAcquired++
			default:
				r.Errors++
				if r.FirstError == nil {
					r.FirstError = err
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	slices.Sort(lat)
	r.P50, r.P99, r.P999 = Percentile(lat, 0.50), Percentile(lat, 0.99), Percentile(lat, 0.999)
	return r
}

// Handover measures n hand-overs on one key: holder takes the lock, a
// waiter blocks in Acquire, the holder releases; the latency is from the
// release call to the waiter's grant. It returns the sorted latencies.
func Handover(ctx context.Context, holder, waiter *leasehold.Locker, key string, n int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	for range n {
		h, err := holder.Acquire(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("holder: %w", err)
		}
		type grant struct {
			at  time.Time
			err error
		}
		got := make(chan grant, 1)
		waiting := make(chan struct{})
		go func() {
			close(waiting)
			w, err := waiter.Acquire(ctx, key)
			at := time.Now()
			if err == nil {
				_ = w.Release(ctx)
			}
			got <- grant{at, err}
		}()
		<-waiting
		// Give the waiter time to find the key held and block; pacing of
		// the measurement, not a correctness wait.
		time.Sleep(20 * time.Millisecond)
		released := time.Now()
		if err := h.Release(ctx); err != nil {
			return nil, fmt.Errorf("holder release: %w", err)
		}
		g := <-got
		if g.err != nil {
			return nil, fmt.Errorf("waiter: %w", g.err)
		}
		lat = append(lat, g.at.Sub(released))
	}
	slices.Sort(lat)
	return lat, nil
}

// LeasePair is a Pair over a backend's Acquire and Release, with a fresh
// owner per call.
func LeasePair(be backend.Leases, ttl time.Duration) Pair {
	return func(ctx context.Context, key string) error {
		o := backend.Owner{Instance: "bench", Nonce: backend.NewNonce()}
		g, err := be.Acquire(ctx, key, o, ttl)
		if err != nil {
			return err
		}
		return be.Release(ctx, key, o, g.Token)
	}
}
