package benchkit

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
)

// The seed's scenario: n clients start at once (a start barrier), each
// takes ITS OWN key with up to SeedTries tries, each try bounded by a
// SeedTry context, SeedGap apart, on a SeedTTL lease; a client that got
// its lock releases it at once.
const (
	SeedTries = 3
	SeedTry   = 50 * time.Millisecond
	SeedGap   = 10 * time.Millisecond
	SeedTTL   = 2 * time.Second
)

// Outcome is how one try ended.
type Outcome uint8

// Outcomes of a try.
const (
	Acquired      Outcome = iota
	NotAcquired           // refused, or never sent: nothing of it remains
	Indeterminate         // timed out with the outcome unknown
	Errored               // anything else
)

// Try is one implementation's single attempt on key within ctx; it returns
// a release func when it got the lock.
type Try func(ctx context.Context, key string) (release func(), o Outcome, err error)

// SeedResult is what Seed measured.
type SeedResult struct {
	N, OK                      int
	NotAcquired, Indeterminate int // the last try's outcome of the clients that failed
	Errors                     int
	FirstError                 error
	P50, P99, P999             time.Duration // barrier → grant, of the clients that got it
	LateP99, LateMax           time.Duration // how long after its deadline a try returned
	Elapsed                    time.Duration // barrier → the last client done
}

// SuccessPct is the share of clients that got their lock, in percent.
func (r SeedResult) SuccessPct() float64 { return 100 * float64(r.OK) / float64(max(r.N, 1)) }

// Seed runs the seed's scenario for n clients, client i on key
// prefix+"k<i>". tries and per are the number of tries and each try's
// bound (SeedTries and SeedTry for the scenario; an implementation that
// retries itself gets one try spanning them all).
func Seed(n, tries int, per time.Duration, prefix string, try Try) SeedResult {
	var (
		mu    sync.Mutex
		res   = SeedResult{N: n}
		lat   = make([]time.Duration, 0, n)
		late  = make([]time.Duration, 0, n*tries)
		wg    sync.WaitGroup
		ready sync.WaitGroup
	)
	start := make(chan struct{})
	ready.Add(n)
	for i := range n {
		wg.Add(1)
		key := prefix + "k" + strconv.Itoa(i)
		go func() {
			defer wg.Done()
			ready.Done()
			<-start
			t0 := time.Now()
			var (
				last  Outcome
				err   error
				lates = make([]time.Duration, 0, tries)
				got   time.Duration
			)
			for t := range tries {
				if t > 0 {
					time.Sleep(SeedGap)
				}
				ctx, cancel := context.WithTimeout(context.Background(), per)
				dl, _ := ctx.Deadline()
				var rel func()
				rel, last, err = try(ctx, key)
				lates = append(lates, max(time.Since(dl), 0))
				cancel()
				if last == Acquired {
					got = time.Since(t0)
					rel()
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			late = append(late, lates...)
			switch last {
			case Acquired:
				res.OK++
				lat = append(lat, got)
			case NotAcquired:
				res.NotAcquired++
			case Indeterminate:
				res.Indeterminate++
			default:
				res.Errors++
				if res.FirstError == nil {
					res.FirstError = err
				}
			}
		}()
	}
	ready.Wait()
	t0 := time.Now()
	close(start)
	wg.Wait()
	res.Elapsed = time.Since(t0)
	slices.Sort(lat)
	slices.Sort(late)
	res.P50, res.P99, res.P999 = Percentile(lat, 0.5), Percentile(lat, 0.99), Percentile(lat, 0.999)
	res.LateP99 = Percentile(late, 0.99)
	if len(late) > 0 {
		res.LateMax = late[len(late)-1]
	}
	return res
}

// LockerTry is one Locker.TryAcquire (released with Lock.Release).
func LockerTry(lk *leasehold.Locker) Try {
	return func(ctx context.Context, key string) (func(), Outcome, error) {
		l, err := lk.TryAcquire(ctx, key)
		switch {
		case err == nil:
			return func() { _ = l.Release(context.Background()) }, Acquired, nil
		case errors.Is(err, leasehold.ErrOutcomeIndeterminate):
			return nil, Indeterminate, err
		case errors.Is(err, leasehold.ErrLockNotAcquired):
			return nil, NotAcquired, err
		}
		return nil, Errored, err
	}
}
