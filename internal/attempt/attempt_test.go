package attempt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The fake backend's verdicts, told apart by Judge.
var (
	errUnknown    = errors.New("connection reset")
	errNotApplied = errors.New("never sent")
	errRefused    = errors.New("held by another owner")
	errSettled    = errors.New("claimed by another owner")
	errLost       = errors.New("lease lost")
)

func judge(err error) Verdict {
	switch {
	case errors.Is(err, errNotApplied):
		return NotApplied
	case errors.Is(err, errRefused):
		return Refused
	case errors.Is(err, errSettled):
		return Settled
	}
	return Unknown
}

const (
	ttl   = time.Second
	span  = ttl - 100*time.Millisecond // the holder trusts a grant this long after its send time
	pause = 10 * time.Millisecond      // Retry's wait between attempts
	rtt   = 10 * time.Millisecond
)

// reply is one answer of the fake backend: err, or a grant for ttl (the
// grant's value is the attempt's number), after delay.
type reply struct {
	delay time.Duration
	err   error
	ttl   time.Duration
}

func grant(delay time.Duration) reply           { return reply{delay: delay, ttl: ttl} }
func fail(err error) reply                      { return reply{delay: rtt, err: err} }
func slowFail(d time.Duration, err error) reply { return reply{delay: d, err: err} }

// A row sends its attempts from t0 (synctest's epoch): attempt i is sent
// when attempt i−1's reply arrived plus pause; confirmations take rtt. The
// expected instants are offsets from t0.
type row struct {
	name     string
	replies  []reply // one per attempt
	confirms []reply // one per confirmation: ttl is the renewal's TTL
	// Retry gives up after maxAttempts attempts, on ctx's end, and on an
	// unconfirmed grant if giveUpUnconfirmed.
	maxAttempts       int
	giveUpUnconfirmed bool
	ctxTimeout        time.Duration // 0: none

	// Expected.
	won           bool
	grant         int           // the attempt whose grant was won (1-based)
	base          time.Duration // the deadline's base, after t0
	ttl           time.Duration
	indeterminate bool
	unconfirmed   bool
	errIs         error // what the run's error wraps
	release       bool  // the orphan release was started
	pending       []bool
	attempts      int
}

var rows = []row{
	{name: "granted in time: counts from its send time, no confirmation",
		replies: []reply{grant(rtt)}, maxAttempts: 5,
		won: true, grant: 1, base: 0, ttl: ttl, attempts: 1},
	{name: "granted late (past its send time's deadline), confirmed: counts from the renewal, with its TTL",
		replies: []reply{grant(2 * ttl)}, confirms: []reply{{delay: rtt, ttl: 3 * ttl}}, maxAttempts: 5,
		won: true, grant: 1, base: 2 * ttl, ttl: 3 * ttl, attempts: 1},
	{name: "granted late, renewal says lost: unconfirmed, indeterminate, nothing to release",
		replies: []reply{grant(2 * ttl)}, confirms: []reply{fail(errLost)}, maxAttempts: 5, giveUpUnconfirmed: true,
		indeterminate: true, unconfirmed: true, errIs: ErrUnconfirmed, pending: []bool{true}, attempts: 1},
	{name: "granted late, renewal's outcome unknown: never handed out dead; released",
		replies: []reply{grant(2 * ttl)}, confirms: []reply{fail(errUnknown)}, maxAttempts: 5, giveUpUnconfirmed: true,
		indeterminate: true, unconfirmed: true, errIs: ErrUnconfirmed, release: true, pending: []bool{true}, attempts: 1},
	{name: "granted late, renewal unknown, retry answered yours in time: a yours renews, counts from the retry",
		replies: []reply{grant(2 * ttl), grant(rtt)}, confirms: []reply{fail(errUnknown)}, maxAttempts: 5,
		won: true, grant: 2, base: 2*ttl + rtt + pause, ttl: ttl, pending: []bool{true}, attempts: 2},
	{name: "unknown then granted, confirmed: counts from the renewal",
		replies: []reply{fail(errUnknown), grant(rtt)}, confirms: []reply{{delay: rtt, ttl: ttl}}, maxAttempts: 5,
		won: true, grant: 2, base: 2*rtt + pause, ttl: ttl, pending: []bool{true}, attempts: 2},
	{name: "unknown then granted, renewal unknown: counts from the unknown attempt's send time",
		replies: []reply{fail(errUnknown), grant(rtt)}, confirms: []reply{fail(errUnknown)}, maxAttempts: 5,
		won: true, grant: 2, base: 0, ttl: ttl, pending: []bool{true}, attempts: 2},
	{name: "unknown, held, granted, renewal unknown: a refusal does not move the earliest unknown send time",
		replies: []reply{fail(errUnknown), fail(errNotApplied), grant(rtt)}, confirms: []reply{fail(errUnknown)}, maxAttempts: 5,
		won: true, grant: 3, base: 0, ttl: ttl, pending: []bool{true, true}, attempts: 3},
	{name: "slow unknown then granted, renewal unknown: counts from the unknown attempt's send, not its reply",
		replies: []reply{slowFail(300*time.Millisecond, errUnknown), grant(rtt)}, confirms: []reply{fail(errUnknown)}, maxAttempts: 5,
		won: true, grant: 2, base: 0, ttl: ttl, pending: []bool{true}, attempts: 2},
	{name: "unknown, not applied for longer than a lease, granted, confirmed: live, from the renewal",
		replies: []reply{fail(errUnknown), slowFail(2*ttl, errNotApplied), grant(rtt)}, confirms: []reply{{delay: rtt, ttl: ttl}}, maxAttempts: 5,
		won: true, grant: 3, base: rtt + pause + 2*ttl + pause + rtt, ttl: ttl, pending: []bool{true, true}, attempts: 3},
	{name: "unknown, not applied for longer than a lease, granted, renewal unknown: past the unknown attempt's deadline, unconfirmed",
		replies: []reply{fail(errUnknown), slowFail(2*ttl, errNotApplied), grant(rtt)}, confirms: []reply{fail(errUnknown)},
		maxAttempts: 5, giveUpUnconfirmed: true,
		indeterminate: true, unconfirmed: true, errIs: ErrUnconfirmed, release: true, pending: []bool{true, true, true}, attempts: 3},
	{name: "unknown, granted, renewal says lost, retried, granted, confirmed",
		replies: []reply{fail(errUnknown), grant(rtt), grant(rtt)}, confirms: []reply{fail(errLost), {delay: rtt, ttl: ttl}}, maxAttempts: 5,
		won: true, grant: 3, base: rtt + pause + rtt + rtt + pause + rtt, ttl: ttl, pending: []bool{true, true}, attempts: 3},
	{name: "unknown, granted, renewal says lost, give up: the unknown attempt may still apply: released",
		replies: []reply{fail(errUnknown), grant(rtt)}, confirms: []reply{fail(errLost)}, maxAttempts: 5, giveUpUnconfirmed: true,
		indeterminate: true, unconfirmed: true, errIs: ErrUnconfirmed, release: true, pending: []bool{true, true}, attempts: 2},
	{name: "refused: not applied",
		replies: []reply{fail(errRefused)}, maxAttempts: 5,
		errIs: errRefused, attempts: 1},
	{name: "unknown then refused: the unknown one may still apply: indeterminate, released",
		replies: []reply{fail(errUnknown), fail(errRefused)}, maxAttempts: 5,
		indeterminate: true, errIs: errRefused, release: true, pending: []bool{true}, attempts: 2},
	{name: "unknown then settled: the answer proves nothing applied",
		replies: []reply{fail(errUnknown), fail(errSettled)}, maxAttempts: 5,
		errIs: errSettled, pending: []bool{true}, attempts: 2},
	{name: "not applied until Retry gives up: not applied",
		replies: []reply{fail(errNotApplied), fail(errNotApplied)}, maxAttempts: 2,
		errIs: errNotApplied, pending: []bool{false, false}, attempts: 2},
	{name: "unknown until Retry gives up: indeterminate, released",
		replies: []reply{fail(errUnknown), fail(errUnknown)}, maxAttempts: 2,
		indeterminate: true, errIs: errUnknown, release: true, pending: []bool{true, true}, attempts: 2},
	{name: "unknown then not applied until Retry gives up: still indeterminate, released",
		replies: []reply{fail(errUnknown), fail(errNotApplied)}, maxAttempts: 2,
		indeterminate: true, errIs: errNotApplied, release: true, pending: []bool{true, true}, attempts: 2},
	{name: "not applied, then ctx ends during an attempt: that attempt's outcome is unknown",
		replies: []reply{fail(errNotApplied), slowFail(time.Hour, errUnknown)}, maxAttempts: 5, ctxTimeout: 100 * time.Millisecond,
		indeterminate: true, errIs: context.DeadlineExceeded, release: true, pending: []bool{false, true}, attempts: 2},
	{name: "ctx ends while waiting after a not-applied attempt: not applied",
		replies: []reply{slowFail(95*time.Millisecond, errNotApplied)}, maxAttempts: 5, ctxTimeout: 100 * time.Millisecond,
		errIs: context.DeadlineExceeded, pending: []bool{false}, attempts: 1},
}

func TestReplyOrders(t *testing.T) {
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { r.check(t) })
		})
	}
}

func (r row) check(t *testing.T) {
	t0 := time.Now()
	ctx := t.Context()
	if r.ctxTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.ctxTimeout)
		defer cancel()
	}
	var (
		tries, confirms int
		pending         []bool
		released        atomic.Bool
	)
	answer := func(ctx context.Context, rp reply) error {
		select {
		case <-time.After(rp.delay):
			return rp.err
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", errUnknown, ctx.Err())
		}
	}
	req := Request[int]{
		Try: func(ctx context.Context) (int, time.Duration, error) {
			if tries == len(r.replies) {
				t.Fatalf("attempt %d: the row has %d replies", tries+1, len(r.replies))
			}
			rp := r.replies[tries]
			tries++
			if err := answer(ctx, rp); err != nil {
				return 0, 0, err
			}
			return tries, rp.ttl, nil
		},
		Judge: judge,
		Span:  func(ttl time.Duration) time.Duration { return ttl - 100*time.Millisecond },
		Confirm: func(ctx context.Context, g int, granted time.Duration) (time.Duration, error) {
			if confirms == len(r.confirms) {
				t.Fatalf("confirmation %d: the row has %d", confirms+1, len(r.confirms))
			}
			rp := r.confirms[confirms]
			confirms++
			if err := answer(context.WithoutCancel(ctx), rp); err != nil {
				return 0, err
			}
			return rp.ttl, nil
		},
		IsLost: func(err error) bool { return errors.Is(err, errLost) },
		Retry: func(ctx context.Context, f Failure) error {
			pending = append(pending, f.Pending)
			switch {
			case f.Verdict == Unconfirmed && r.giveUpUnconfirmed:
				return f.Err
			case ctx.Err() != nil:
				return ctx.Err()
			case f.Attempts >= r.maxAttempts:
				return f.Err
			}
			select {
			case <-time.After(pause):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		Release: func() { released.Store(true) },
	}
	res, err := Run(ctx, req)
	synctest.Wait() // a release started in the background has run
	if tries != r.attempts {
		t.Errorf("attempts: %d, want %d", tries, r.attempts)
	}
	if confirms != len(r.confirms) {
		t.Errorf("confirmations: %d, want %d", confirms, len(r.confirms))
	}
	if !slices.Equal(pending, r.pending) {
		t.Errorf("Retry saw pending %v, want %v", pending, r.pending)
	}
	if released.Load() != r.release {
		t.Errorf("orphan release started: %v, want %v", released.Load(), r.release)
	}
	if r.won {
		if err != nil {
			t.Fatalf("Run: %v, want the grant of attempt %d", err, r.grant)
		}
		if res.Grant != r.grant || !res.Base.Equal(t0.Add(r.base)) || res.TTL != r.ttl {
			t.Fatalf("won attempt %d's grant counted from t0+%v for %v, want attempt %d's from t0+%v for %v",
				res.Grant, res.Base.Sub(t0), res.TTL, r.grant, r.base, r.ttl)
		}
		if !time.Now().Before(res.Base.Add(span)) {
			t.Fatalf("handed out a grant whose deadline t0+%v has passed (now t0+%v)", res.Base.Add(span).Sub(t0), time.Since(t0))
		}
		return
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("Run: %v (%T), want an *Error", err, err)
	}
	if e.Indeterminate != r.indeterminate || e.Unconfirmed != r.unconfirmed || !errors.Is(err, r.errIs) {
		t.Fatalf("Run: %v (indeterminate %v, unconfirmed %v), want indeterminate %v, unconfirmed %v, wrapping %v",
			err, e.Indeterminate, e.Unconfirmed, r.indeterminate, r.unconfirmed, r.errIs)
	}
	if e.Indeterminate && e.Unknown == nil && !e.Unconfirmed {
		t.Fatalf("indeterminate without an unknown attempt or an unconfirmed grant: %+v", e)
	}
}

// A round trip too short for the clock to see (0: an in-process backend,
// a coarse clock) is the fastest, not "none measured yet": one slow answer
// after it must not become the estimate of the next round trip.
func TestFastestCountsAZeroRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		delays := []time.Duration{0, 1500 * time.Millisecond, 10 * time.Millisecond}
		var fastest []time.Duration
		tries := 0
		_, err := Run(t.Context(), Request[int]{
			Try: func(context.Context) (int, time.Duration, error) {
				time.Sleep(delays[tries])
				tries++
				return 0, 0, errNotApplied
			},
			Judge: judge,
			Span:  func(ttl time.Duration) time.Duration { return ttl },
			Retry: func(_ context.Context, f Failure) error {
				fastest = append(fastest, f.Fastest)
				if f.Attempts == len(delays) {
					return f.Err
				}
				return nil
			},
		})
		if !errors.Is(err, errNotApplied) {
			t.Fatalf("Run: %v, want the last attempt's error", err)
		}
		if want := []time.Duration{0, 0, 0}; !slices.Equal(fastest, want) {
			t.Fatalf("Retry was told fastest %v, want %v", fastest, want)
		}
	})
}
