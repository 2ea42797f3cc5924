// Package keeper keeps a lease on behalf of its holder: it computes the
// deadline the holder may trust, renews the lease on a period counted from
// the send time of the last confirmed renewal, and reports the lease lost —
// when the backend says so, or when the deadline passes without a confirmed
// renewal, whichever comes first.
//
// The deadline is the send time of the last successful acquire or renewal
// plus granted × (1 − drift) − margin: the backend started the lease's TTL
// no earlier than the request was sent, and its clock may run faster than
// ours by up to drift. Locks and elections (package leasehold) and
// scheduler runs (package schedule) use the same keeper, so both keep the
// same promise.
package keeper

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// DefaultDrift is the assumed worst clock-rate difference between a host
// and the backend.
const DefaultDrift = 0.01

// DefaultMargin is the fixed safety margin for a lease of ttl:
// min(ttl/20, 500 ms).
func DefaultMargin(ttl time.Duration) time.Duration { return min(ttl/20, 500*time.Millisecond) }

// ErrDeadline is what Config.Lost is given when the holder's deadline
// passed without a confirmed renewal.
var ErrDeadline = errors.New("deadline passed without a confirmed renewal")

// Timing is how much of a granted TTL the holder trusts.
type Timing struct {
	Drift  float64       // in [0, 0.5)
	Margin time.Duration // ≥ 0
}

// Validate reports a drift or margin out of range, naming the value. The
// error wraps nothing: callers wrap it in their own ErrInvalid.
func (t Timing) Validate() error {
	switch {
	case !(t.Drift >= 0 && t.Drift < 0.5):
		return fmt.Errorf("drift %v is not in [0, 0.5)", t.Drift)
	case t.Margin < 0:
		return fmt.Errorf("margin %v is negative", t.Margin)
	}
	return nil
}

// Span is how long after the send time of a successful acquire or renewal
// the holder may trust a lease granted for granted: granted × (1 − drift)
// − margin.
func (t Timing) Span(granted time.Duration) time.Duration {
	return time.Duration(float64(granted)*(1-t.Drift)) - t.Margin
}

// Deadline is the holder's deadline for a lease granted for granted by a
// request sent at sent.
func (t Timing) Deadline(sent time.Time, granted time.Duration) time.Time {
	return sent.Add(t.Span(granted))
}

// Config configures a Keeper.
type Config struct {
	Timing
	// Every is the renewal period, counted from the send time of the last
	// confirmed renewal. A failed renewal is retried after a jittered
	// Every/4. A grant too short for it (its deadline comes at or before
	// Every: a backend may grant less than was asked) is renewed every
	// granted/3 instead, or every half of its span if that is shorter.
	Every time.Duration
	// AttemptTimeout bounds one renewal; it is also cut at the deadline, so
	// that a renewal left hanging cannot hold off the loss.
	AttemptTimeout time.Duration
	// Renew renews the lease once and returns the TTL the backend granted.
	// An error wrapping the backend's lease-lost error ends the lease: Lost
	// is then given it.
	Renew func(ctx context.Context) (granted time.Duration, err error)
	// IsLost tells a renewal error that ends the lease (the backend says it
	// is no longer held) from one that is retried.
	IsLost func(err error) bool
	// Lost is called once, when the lease is lost: with ErrDeadline, or
	// with the renewal's error that IsLost accepted. It is not called after
	// Stop returned.
	Lost func(err error)
	// Renewed, if set, is told each renewal that moved the deadline, with
	// the time it took. Failed, if set, each renewal that failed (not those
	// that failed because Run's context ended).
	Renewed func(took time.Duration)
	Failed  func(err error, took time.Duration)
}

// Keeper holds one lease: its deadline, and the renew loop (Run).
type Keeper struct {
	cfg Config

	mu       sync.Mutex
	deadline time.Time
	last     time.Time // send time of the last confirmed acquire or renewal
	granted  time.Duration
	expiry   *time.Timer // calls lose(ErrDeadline) at deadline
	stopped  bool

	lossMu sync.Mutex    // held while Lost runs, and by Stop
	err    error         // what the lease was lost to; set before lost is closed
	lost   chan struct{} // closed when the lease is lost, after Lost returned
}

// Start returns a Keeper for a lease granted for granted by a request sent
// at sent, with its deadline armed: Lost is called at the deadline unless a
// renewal moves it. Run renews it.
func Start(cfg Config, sent time.Time, granted time.Duration) *Keeper {
	k := &Keeper{cfg: cfg, last: sent, granted: granted, lost: make(chan struct{})}
	k.deadline = cfg.Deadline(sent, granted)
	// Under mu: a deadline already past fires at once, and lose reads
	// expiry under mu — it must find the timer assigned.
	k.mu.Lock()
	k.expiry = time.AfterFunc(time.Until(k.deadline), func() { k.lose(ErrDeadline) })
	k.mu.Unlock()
	return k
}

// Deadline is the holder's current deadline, on the local monotonic clock.
func (k *Keeper) Deadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.deadline
}

// Last is the send time of the last confirmed acquire or renewal.
func (k *Keeper) Last() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.last
}

// Lost is closed once the lease is lost (after Config.Lost returned).
func (k *Keeper) Lost() <-chan struct{} { return k.lost }

// Err is what the lease was lost to (ErrDeadline or the renewal's error),
// once Lost is closed; nil before.
func (k *Keeper) Err() error {
	select {
	case <-k.lost:
		return k.err
	default:
		return nil
	}
}

// Stop disarms the deadline: Lost is not called after Stop returns (unless
// it was called before, and then it has returned). It does not end Run; end Run's context for that.
func (k *Keeper) Stop() {
	k.lossMu.Lock() // waits for a Lost in progress
	defer k.lossMu.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	k.expiry.Stop()
}

func (k *Keeper) lose(err error) {
	k.lossMu.Lock()
	defer k.lossMu.Unlock()
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	k.stopped = true // no second loss, and no extension after this one
	k.expiry.Stop()
	k.mu.Unlock()
	k.err = err
	// Lost runs before lost is closed: Run returns only after it, so what
	// Lost records is seen by whoever waits for Run.
	k.cfg.Lost(err)
	close(k.lost)
}

// extend moves the deadline after a renewal sent at sent was confirmed. It
// reports false if the old deadline already passed — whether or not its
// timer has run yet (a loaded host runs timers late; that timer then ends
// the lease) — or Stop was called: once the holder could not be sure, it
// must not act again under the grant.
func (k *Keeper) extend(sent time.Time, granted time.Duration) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped || !time.Now().Before(k.deadline) || !k.expiry.Stop() {
		return false
	}
	k.last, k.granted = sent, granted
	k.deadline = k.cfg.Deadline(sent, granted)
	k.expiry = time.AfterFunc(time.Until(k.deadline), func() { k.lose(ErrDeadline) })
	return true
}

// every is the renewal period of the last grant: Every, or — if Every
// would not come before the grant's deadline — granted/3, or half the
// span the holder trusts if that is shorter still (a fixed margin takes a
// larger share of a short grant).
func (k *Keeper) every() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	if span := k.cfg.Span(k.granted); k.cfg.Every >= span {
		return max(min(k.granted/3, span/2), time.Millisecond)
	}
	return k.cfg.Every
}

// Run renews the lease every Every (counted from the send time of the last
// confirmed renewal), retries a failure after a jittered Every/4 until the
// deadline, and returns when ctx ends or the lease is lost. The renewal
// context is derived from ctx: ending ctx cancels a renewal in flight.
func (k *Keeper) Run(ctx context.Context) {
	next := time.NewTimer(time.Until(k.Last().Add(k.every())))
	defer next.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-k.lost:
			return
		case <-next.C:
		}
		sent := time.Now()
		adl := sent.Add(k.cfg.AttemptTimeout)
		if d := k.Deadline(); d.Before(adl) {
			adl = d
		}
		rctx, cancel := context.WithDeadline(ctx, adl)
		granted, err := k.cfg.Renew(rctx)
		cancel()
		switch {
		case err == nil:
			if !k.extend(sent, granted) {
				continue // the deadline fired meanwhile: lost
			}
			if k.cfg.Renewed != nil {
				k.cfg.Renewed(time.Since(sent))
			}
			next.Reset(time.Until(sent.Add(k.every())))
		case k.cfg.IsLost(err):
			k.lose(err)
			return
		case ctx.Err() != nil:
			continue // stopped while renewing: not a renewal failure
		default:
			if k.cfg.Failed != nil {
				k.cfg.Failed(err, time.Since(sent))
			}
			next.Reset(Jitter(max(k.every()/4, time.Millisecond)))
		}
	}
}

// Jitter returns a duration uniformly in [d/2, d].
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}
