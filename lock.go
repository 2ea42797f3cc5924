package leasehold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/attempt"
	"github.com/leasehold/leasehold/internal/keeper"
)

// Locker hands out locks on keys of one namespace of a backend.
type Locker struct {
	b           backend.Leases
	cfg         config
	backendName string     // for observer events
	queue       localQueue // this process's goroutines blocked on a key; see queue.go
}

// NewLocker returns a Locker over b. Options are validated here; see
// Option for the defaults.
func NewLocker(b backend.Leases, opts ...Option) (*Locker, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: backend is nil", ErrInvalid)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if min := b.Capabilities().MinTTL; cfg.ttl < min {
		return nil, fmt.Errorf("%w: ttl %v is below backend %s's minimum of %v", ErrInvalid, cfg.ttl, b.Capabilities().Name, min)
	}
	return &Locker{b: b, cfg: cfg, backendName: b.Capabilities().Name}, nil
}

// Instance returns the instance name this Locker acquires under.
func (lk *Locker) Instance() string { return lk.cfg.instance }

// Namespace returns the Locker's namespace.
func (lk *Locker) Namespace() string { return lk.cfg.namespace }

// Lock is a held lease on a key. Its Context is cancelled when the lease is
// lost, when it can no longer be known to be held, or on Release.
type Lock struct {
	lk    *Locker
	key   string // user path
	kind  string // kindLock or kindRole
	bkey  string // backend key
	owner backend.Owner
	token Token

	ctx    context.Context
	cancel context.CancelCauseFunc
	leave  func() // gives up the local queue's turn (queue.go); idempotent

	keep      *keeper.Keeper // the deadline and the watchdog's renewals
	watchDone chan struct{}
	release   sync.Once
	relErr    error
}

// Key returns the lock's key (without the namespace).
func (l *Lock) Key() string { return l.key }

// Token returns the fencing token of this grant.
func (l *Lock) Token() Token { return l.token }

// Context is cancelled when the lock is lost or released;
// context.Cause tells which (ErrLeaseLost or ErrLockReleased). It carries the
// values of the context Acquire was called with, not its cancellation.
func (l *Lock) Context() context.Context { return l.ctx }

// Done is Context().Done().
func (l *Lock) Done() <-chan struct{} { return l.ctx.Done() }

// Deadline returns the holder's current deadline: the instant (on the local
// monotonic clock) at which the lock's context is cancelled unless a renewal
// sent before then succeeds.
func (l *Lock) Deadline() time.Time { return l.keep.Deadline() }

// TryAcquire acquires key if it is free, and fails at once with an error
// wrapping ErrLockNotAcquired (and backend.ErrHeld, whose *backend.HeldError
// names the holder) if it is held.
func (lk *Locker) TryAcquire(ctx context.Context, key string) (*Lock, error) {
	return lk.acquire(ctx, kindLock, "key", key, false, nil)
}

// Acquire blocks until key is acquired or ctx ends. Between attempts it
// waits with jittered exponential backoff, and wakes at once when the
// backend pushes a release event; it sends no attempt that ctx's deadline
// would cut short (less than two of the call's fastest round trips left)
// and waits the deadline out instead. When ctx ends, the error wraps
// ErrLockNotAcquired and ctx's error (naming the key and the holder last seen)
// if no request of the call can have been applied, and ErrOutcomeIndeterminate
// if one may have been: then Acquire has started a bounded background
// search that releases the orphaned grant.
// On a backend that keeps waiters in line on the server (backend.Queue,
// e.g. ZooKeeper) Acquire waits in that line instead of retrying, so a
// release hands the key to the next in line without a write by the waiter.
func (lk *Locker) Acquire(ctx context.Context, key string) (*Lock, error) {
	return lk.acquire(ctx, kindLock, "key", key, true, nil)
}

// Do acquires key (blocking), runs fn with a context that is cancelled when
// ctx ends or the lock is lost, and releases the lock. If fn returns nil but
// the lock was lost while it ran, Do returns an error wrapping ErrLeaseLost:
// fn's effects may have overlapped with the next holder's unless they were
// written through a sink that checks the token.
func (lk *Locker) Do(ctx context.Context, key string, fn func(ctx context.Context, token Token) error) error {
	if fn == nil {
		return fmt.Errorf("%w: fn is nil", ErrInvalid)
	}
	l, err := lk.Acquire(ctx, key)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(l.Context())
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	err = fn(fctx, l.token)
	stop()
	lost := context.Cause(l.Context())
	cancel(nil)
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), lk.cfg.renewDeadline)
	relErr := l.Release(rctx)
	rcancel()
	if err != nil {
		return err
	}
	if lost != nil {
		return fmt.Errorf("key %q, token %d: %w", key, l.token, lost)
	}
	return relErr
}

// maxUnknownRetries bounds how often TryAcquire retries a request whose
// outcome is unknown before it reports ErrOutcomeIndeterminate.
const maxUnknownRetries = 3

// acquire acquires the backend key <namespace>/<kind>/<key>. observe, if
// not nil, is told the holder each time the key is found held.
func (lk *Locker) acquire(ctx context.Context, kind, field, key string, wait bool, observe func(backend.Lease)) (*Lock, error) {
	if o := lk.cfg.observer; o != nil {
		start := time.Now()
		l, err := lk.acquireOnce(ctx, kind, field, key, wait, observe)
		ev := Event{Kind: EventAcquire, Backend: lk.backendName, Namespace: lk.cfg.namespace,
			Result: acquireResult(ctx, err), Duration: time.Since(start), Err: err}
		if kind == kindRole {
			ev.Role = key
		} else {
			ev.Key = key
		}
		if l != nil {
			ev.Token = l.token
		}
		o.ObserveLock(ev)
		return l, err
	}
	return lk.acquireOnce(ctx, kind, field, key, wait, observe)
}

func (lk *Locker) acquireOnce(ctx context.Context, kind, field, key string, wait bool, observe func(backend.Lease)) (lock *Lock, err error) {
	if err := ValidatePath(field, key); err != nil {
		return nil, err
	}
	bkey := backendKey(lk.cfg.namespace, kind, key)
	leave := func() {}
	if wait && observe == nil {
		if leave, err = lk.queue.enter(ctx, bkey); err != nil {
			return nil, fmt.Errorf("%w: acquire %q: waiting behind this process's other waiters: %w", ErrLockNotAcquired, key, err)
		}
		defer func() {
			if lock == nil {
				leave()
			}
		}()
	}
	// One nonce for the whole call: a retry of an attempt that was applied
	// answers "yours" instead of leaving an orphaned grant.
	owner := backend.Owner{Instance: lk.cfg.instance, Nonce: backend.NewNonce()}
	if q, ok := lk.b.(backend.Queue); ok && wait && observe == nil {
		return lk.acquireQueued(ctx, q, kind, key, bkey, owner, leave)
	}
	req := lk.attemptRequest(bkey, owner)
	req.Try = func(ctx context.Context) (backend.Grant, time.Duration, error) {
		g, err := lk.b.Acquire(ctx, bkey, owner, lk.cfg.ttl)
		var held *backend.HeldError
		if observe != nil && errors.As(err, &held) {
			observe(held.Holder)
		}
		return g, g.TTL, err
	}
	req.Judge = func(err error) attempt.Verdict { return judgeAcquire(err, wait) }
	req.Retry = lk.acquireRetry(key, bkey, wait)
	req.Release = func() { lk.cleanup(bkey, owner) }
	r, err := attempt.Run(ctx, req)
	if err != nil {
		return nil, acquireError(key, err)
	}
	g := r.Grant
	g.TTL = r.TTL
	return lk.hold(ctx, kind, key, bkey, owner, g, r.Base, leave), nil
}

// attemptRequest is what acquiring bkey under owner shares with every
// caller of the attempt engine: the lease timing and the confirming
// renewal.
func (lk *Locker) attemptRequest(bkey string, owner backend.Owner) attempt.Request[backend.Grant] {
	return attempt.Request[backend.Grant]{
		Span: lk.cfg.safeSpan,
		// Bounded like a watchdog renewal, not by the grant's deadline: a
		// Renew that succeeds proves the lease was live when it arrived and
		// extends it, however old the earliest attempt is.
		Confirm: func(ctx context.Context, g backend.Grant, _ time.Duration) (time.Duration, error) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lk.cfg.renewDeadline)
			defer cancel()
			rg, err := lk.b.Renew(rctx, backend.RenewRequest{Key: bkey, Owner: owner, Token: g.Token, TTL: lk.cfg.ttl})
			return rg.TTL, err
		},
		IsLost: func(err error) bool { return errors.Is(err, backend.ErrLeaseLost) },
	}
}

// judgeAcquire says what a failed Acquire attempt's error proves. A held
// key ends a TryAcquire and is waited out by a blocking Acquire; an
// attempt of ours whose outcome was unknown may still be applied after the
// holder leaves.
func judgeAcquire(err error, wait bool) attempt.Verdict {
	switch {
	case errors.As(err, new(*backend.HeldError)) && wait:
		return attempt.NotApplied
	case errors.Is(err, backend.ErrRefused) && !errors.Is(err, backend.ErrNotApplied):
		// Refused for want of permission after part of it may have run:
		// Retry gives up at once.
		return attempt.Unknown
	case errors.As(err, new(*backend.HeldError)), errors.Is(err, backend.ErrRefused),
		errors.Is(err, backend.ErrInvalid), errors.Is(err, backend.ErrClosed):
		// A refusal for want of permission gets the same answer again.
		return attempt.Refused
	case errors.Is(err, backend.ErrNotApplied):
		return attempt.NotApplied
	}
	return attempt.Unknown // timed out, connection lost, ...: it may have been applied
}

// acquireRetry is the Retry of an acquire: how long to wait before the
// next attempt, and when to give up. The error it gives up with is the
// call's error when no attempt may have been applied (acquireError).
func (lk *Locker) acquireRetry(key, bkey string, wait bool) func(context.Context, attempt.Failure) error {
	backoff, unknown := lk.cfg.backoffMin, 0
	return func(ctx context.Context, f attempt.Failure) error {
		var held *backend.HeldError
		switch {
		case f.Verdict == attempt.Unconfirmed:
			// Lost before it could be confirmed, or not confirmed and no
			// longer trustworthy: never hand out a lock that is already past
			// its deadline. A blocking Acquire tries again (a retry answers
			// "yours" and renews).
			if !wait || sleep(ctx, jitter(backoff)) != nil {
				return f.Err
			}
			return nil
		case errors.As(f.Err, &held): // a blocking Acquire: wait for the holder to leave
			if werr := lk.wait(ctx, bkey, backoff, held.Holder.Remaining); werr != nil {
				if f.Pending {
					return f.Unknown
				}
				return heldAtDeadline(key, held, werr)
			}
			// An attempt that ctx's deadline would cut short could only end
			// with an unknown outcome: wait the deadline out instead, and
			// report the key held.
			if dl, ok := ctx.Deadline(); ok && !f.Pending && time.Until(dl) < 2*f.Fastest {
				<-ctx.Done()
				return heldAtDeadline(key, held, ctx.Err())
			}
			backoff = min(backoff*2, lk.cfg.backoffMax)
			return nil
		case f.Verdict == attempt.NotApplied && !f.Pending:
			// Never sent, and no earlier attempt may have been applied:
			// nothing is ours, so this is "not acquired", not "unknown".
			if ctx.Err() != nil || !wait {
				return fmt.Errorf("%w: acquire %q: %w", ErrLockNotAcquired, key, f.Err)
			}
			if sleep(ctx, jitter(backoff)) != nil {
				return fmt.Errorf("%w: acquire %q: %w", ErrLockNotAcquired, key, f.Err)
			}
			return nil
		}
		// The attempt, or an earlier one, may have been applied.
		unknown++
		if errors.Is(f.Err, backend.ErrRefused) || ctx.Err() != nil || (!wait && unknown > maxUnknownRetries) {
			return f.Err
		}
		lk.cfg.logger.Warn("acquire failed, retrying", "key", key, "err", f.Err)
		if sleep(ctx, jitter(backoff)) != nil {
			return f.Err
		}
		backoff = min(backoff*2, lk.cfg.backoffMax)
		return nil
	}
}

// acquireError is the error of an acquire that won nothing (err is the
// attempt engine's *attempt.Error).
func acquireError(key string, err error) error {
	var e *attempt.Error
	if !errors.As(err, &e) {
		return err
	}
	var held *backend.HeldError
	refused := errors.Is(e.Err, backend.ErrRefused)
	switch {
	case e.Indeterminate && e.Unconfirmed:
		return fmt.Errorf("%w: acquire %q: %w", ErrOutcomeIndeterminate, key, e.Err)
	case e.Indeterminate && refused:
		return fmt.Errorf("%w: acquire %q: refused by the backend's server (no permission?) after an attempt that may have been applied: %w", ErrOutcomeIndeterminate, key, e.Err)
	case e.Indeterminate && errors.As(e.Err, &held):
		return fmt.Errorf("%w: acquire %q: an earlier attempt's outcome is unknown: %w", ErrOutcomeIndeterminate, key, e.Err)
	case e.Indeterminate:
		return fmt.Errorf("%w: acquire %q: %w", ErrOutcomeIndeterminate, key, e.Err)
	case refused:
		return fmt.Errorf("acquire %q: refused by the backend's server (no permission?): %w", key, e.Err)
	case errors.As(e.Err, &held): // TryAcquire
		return fmt.Errorf("%w: %w", ErrLockNotAcquired, e.Err)
	}
	return e.Err // ErrInvalid, ErrClosed, or the error the acquire's Retry gave up with
}

// heldAtDeadline is the error of a blocking acquire whose context ended
// (cause) while held found the key held. Not a *HeldError: the key may have
// changed hands since.
func heldAtDeadline(key string, held *backend.HeldError, cause error) error {
	return fmt.Errorf("%w: acquire %q: held by %s (token %d) when the wait ended: %w",
		ErrLockNotAcquired, key, held.Holder.Owner.Instance, held.Holder.Token, cause)
}

// acquireQueued is a blocking acquire on a backend that keeps waiters in
// line on the server (backend.Queue): one call that returns when the key is
// granted, and the grant's TTL counts from the send time the backend
// reports.
func (lk *Locker) acquireQueued(ctx context.Context, q backend.Queue, kind, key, bkey string, owner backend.Owner, leave func()) (*Lock, error) {
	g, sent, err := q.AcquireQueued(ctx, bkey, owner, lk.cfg.ttl)
	for err == nil && time.Until(sent.Add(lk.cfg.safeSpan(g.TTL))) <= 0 {
		// The grant's reply came after the deadline its send time gives:
		// the backend may have expired it already. Confirm with a renewal,
		// or give it back and queue again under a new nonce.
		confirm := lk.attemptRequest(bkey, owner)
		base, granted, gone := confirm.Confirmation(ctx, g, g.TTL, sent)
		if !gone && time.Until(base.Add(lk.cfg.safeSpan(granted))) > 0 {
			g.TTL, sent = granted, base
			break
		}
		if !gone {
			lk.cleanup(bkey, owner)
		}
		if ctx.Err() != nil {
			kind := ErrLockNotAcquired // the backend said the grant is gone
			if !gone {
				kind = ErrOutcomeIndeterminate // released, unless the cleanup failed
			}
			return nil, fmt.Errorf("%w: acquire %q: the grant could not be confirmed before its deadline", kind, key)
		}
		owner = backend.Owner{Instance: owner.Instance, Nonce: backend.NewNonce()}
		g, sent, err = q.AcquireQueued(ctx, bkey, owner, lk.cfg.ttl)
	}
	switch {
	case err == nil:
		return lk.hold(ctx, kind, key, bkey, owner, g, sent, leave), nil
	case errors.Is(err, backend.ErrInvalid), errors.Is(err, backend.ErrClosed):
		return nil, err
	case errors.Is(err, backend.ErrNotApplied):
		return nil, fmt.Errorf("%w: acquire %q: %w", ErrLockNotAcquired, key, err)
	}
	// The backend could not confirm it left the line; it goes on
	// withdrawing in the background and releases a grant that arises.
	return nil, fmt.Errorf("%w: acquire %q: %w", ErrOutcomeIndeterminate, key, err)
}

// cleanup is started when Acquire gives up after attempts whose outcome is
// unknown: if one of them was applied, the grant is ours and nobody would
// release it before its TTL ran out, so look and release it. It runs in the
// background, so that Acquire returns when its context ends and not up to
// the cleanup's bound later; bounded by min(RenewDeadline, 2 s); on failure
// the lease expires on its own.
func (lk *Locker) cleanup(bkey string, owner backend.Owner) {
	ctx, cancel := context.WithTimeout(context.Background(), min(lk.cfg.renewDeadline, 2*time.Second))
	defer cancel()
	if l, err := lk.b.Get(ctx, bkey); err == nil && l.Owner == owner {
		_ = lk.b.Release(ctx, bkey, owner, l.Token)
	}
}

// wait sleeps before the next attempt: a jittered backoff, shortened to the
// holder's remaining time, cut short by a pushed release event.
func (lk *Locker) wait(ctx context.Context, bkey string, backoff, remaining time.Duration) error {
	d := jitter(backoff)
	if remaining > 0 && remaining < d {
		d = remaining + time.Millisecond
	}
	n, ok := lk.b.(backend.Notifier)
	if !ok {
		return sleep(ctx, d)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := n.Wait(wctx, bkey)
	if err != nil {
		return sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-ch:
	case <-t.C:
	}
	return nil
}

// jitter returns a duration uniformly in [d/2, d].
func jitter(d time.Duration) time.Duration { return keeper.Jitter(d) }

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// hold builds the Lock for a grant and starts its watchdog: it renews
// every renewEvery (counted from the send time of the last successful
// renewal), retries failures every renewEvery/4 until the deadline, and
// stops when the lock is lost or released (internal/keeper).
func (lk *Locker) hold(ctx context.Context, kind, key, bkey string, owner backend.Owner, g backend.Grant, sent time.Time, leave func()) *Lock {
	lctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	l := &Lock{
		lk: lk, key: key, kind: kind, bkey: bkey, owner: owner, token: Token(g.Token),
		ctx: lctx, cancel: cancel, leave: leave, watchDone: make(chan struct{}),
	}
	cfg := &lk.cfg
	l.keep = keeper.Start(keeper.Config{
		Timing: cfg.timing(), Every: cfg.renewEvery, AttemptTimeout: cfg.renewDeadline,
		Renew: func(ctx context.Context) (time.Duration, error) {
			rg, err := lk.b.Renew(ctx, backend.RenewRequest{Key: bkey, Owner: owner, Token: g.Token, TTL: cfg.ttl})
			return rg.TTL, err
		},
		IsLost: func(err error) bool { return errors.Is(err, backend.ErrLeaseLost) },
		Lost: func(err error) {
			if errors.Is(err, keeper.ErrDeadline) {
				l.lose(fmt.Errorf("%w: key %q, token %d: deadline passed without a confirmed renewal", ErrLeaseLost, l.key, l.token))
				return
			}
			l.lose(fmt.Errorf("key %q, token %d: %w", l.key, l.token, err))
		},
		Renewed: func(took time.Duration) {
			if o := cfg.observer; o != nil {
				ev := l.event(EventRenew)
				ev.Result, ev.Duration = ResultOK, took
				o.ObserveLock(ev)
			}
		},
		Failed: func(err error, took time.Duration) {
			if o := cfg.observer; o != nil {
				ev := l.event(EventRenewFailed)
				ev.Result, ev.Duration, ev.Err = ResultError, took, err
				o.ObserveLock(ev)
			}
			cfg.logger.Warn("renew failed, retrying", "key", l.key, "token", uint64(l.token), "err", err)
		},
	}, sent, g.TTL)
	go l.watch()
	return l
}

// lose cancels the lock's context with cause and, if that cancellation
// took effect (the lock was not released or lost before), tells the
// observer.
func (l *Lock) lose(cause error) {
	l.cancel(cause)
	if o := l.lk.cfg.observer; o != nil && context.Cause(l.ctx) == cause {
		ev := l.event(EventLost)
		ev.Result, ev.Err = ResultLost, cause
		o.ObserveLock(ev)
	}
}

// watch runs the watchdog until the lock is lost or released. A lock
// whose deadline passed is released on the backend, best effort, and a
// lost lock gives up its local queue turn here (a released one in Release).
func (l *Lock) watch() {
	defer close(l.watchDone)
	l.keep.Run(l.ctx)
	if errors.Is(l.keep.Err(), keeper.ErrDeadline) {
		l.bestEffortRelease()
	}
	if errors.Is(context.Cause(l.ctx), ErrLeaseLost) {
		l.leave()
	}
}

// bestEffortRelease frees a lease whose holder gave up on it (its deadline
// passed) so the next holder need not wait for the backend's expiry.
func (l *Lock) bestEffortRelease() {
	ctx, cancel := context.WithTimeout(context.Background(), l.lk.cfg.renewDeadline)
	defer cancel()
	_ = l.lk.b.Release(ctx, l.bkey, l.owner, uint64(l.token))
}

// Release cancels the lock's context first, stops the watchdog, then
// releases the lease on the backend, retrying until ctx ends. A lease that is
// no longer held by this grant counts as released. If the backend cannot be
// reached before ctx ends the error wraps ErrOutcomeIndeterminate; the lease then
// expires on its own within its TTL. Release is idempotent.
func (l *Lock) Release(ctx context.Context) error {
	l.release.Do(func() {
		l.cancel(ErrLockReleased)
		<-l.watchDone
		l.keep.Stop()
		var start time.Time
		if l.lk.cfg.observer != nil { // no clock read without an observer
			start = time.Now()
		}
		l.relErr = l.releaseBackend(ctx)
		l.leave()
		if o := l.lk.cfg.observer; o != nil {
			ev := l.event(EventRelease)
			ev.Result, ev.Duration, ev.Err = releaseResult(l.relErr), time.Since(start), l.relErr
			o.ObserveLock(ev)
		}
	})
	return l.relErr
}

func (l *Lock) releaseBackend(ctx context.Context) error {
	backoff := l.lk.cfg.backoffMin
	for {
		err := l.lk.b.Release(ctx, l.bkey, l.owner, uint64(l.token))
		if err == nil || errors.Is(err, backend.ErrLeaseLost) {
			return nil
		}
		if errors.Is(err, backend.ErrInvalid) || errors.Is(err, backend.ErrClosed) {
			return err
		}
		if serr := sleep(ctx, jitter(backoff)); serr != nil {
			return fmt.Errorf("%w: release %q token %d: %w", ErrOutcomeIndeterminate, l.key, l.token, err)
		}
		backoff = min(backoff*2, l.lk.cfg.backoffMax)
	}
}
