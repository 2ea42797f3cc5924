package leasehold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// Callbacks are called by an Elector from its Run goroutine. Each may be
// nil. They must not block for long: the leader's lease keeps being renewed
// while they run, but the leader's work starts only after OnElected returns.
type Callbacks struct {
	// OnElected is called when this instance becomes leader, with the term's
	// fencing token.
	OnElected func(token Token)
	// OnDemoted is called when this instance stops being leader (lost,
	// resigned, or its work returned), after the role was released.
	OnDemoted func()
	// OnNewLeader is called when the observed leader changes, with the
	// leader's identity (instance name), this instance's included.
	OnNewLeader func(identity string)
}

// Leader describes the current holder of a role.
type Leader struct {
	Identity string
	Token    Token
	// Remaining is the leader's remaining lease by the backend's clock when
	// read; information only.
	Remaining time.Duration
}

// Elector campaigns for a named role under this instance's identity.
type Elector struct {
	lk   *Locker
	role string
	cb   Callbacks

	mu       sync.Mutex
	running  bool
	observed string
	resign   context.CancelCauseFunc // cancels the current term's context
	termDone chan struct{}           // closed after the current term's role was released
}

// NewElector returns an Elector for role over b. The identity is the
// WithInstance option (default: host name).
func NewElector(b backend.Leases, role string, cb Callbacks, opts ...Option) (*Elector, error) {
	if err := ValidatePath("role", role); err != nil {
		return nil, err
	}
	lk, err := NewLocker(b, opts...)
	if err != nil {
		return nil, err
	}
	return &Elector{lk: lk, role: role, cb: cb}, nil
}

// Identity returns this instance's identity in the election.
func (e *Elector) Identity() string { return e.lk.cfg.instance }

// Run campaigns for the role until ctx ends. Each time this instance is
// elected it calls fn with a leader context, which is cancelled when the
// lease is lost (or can no longer be known to be held), on Resign, or when
// ctx ends. When fn returns, the role is released. Run then:
//   - returns fn's error if it returned one;
//   - returns nil if ctx ended, after Resign, or if fn returned nil while
//     still leading (its work is done);
//   - campaigns again if the lease was lost.
//
// Only one Run may be active per Elector.
func (e *Elector) Run(ctx context.Context, fn func(leaderCtx context.Context) error) error {
	if fn == nil {
		return fmt.Errorf("%w: fn is nil", ErrInvalid)
	}
	e.mu.Lock()
	if e.running {
		e.mu.Unlock()
		return fmt.Errorf("%w: Run is already active for role %q", ErrInvalid, e.role)
	}
	e.running = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.running = false
		e.mu.Unlock()
	}()

	for {
		l, err := e.campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		lost, resigned, err := e.term(ctx, l, fn)
		if err != nil {
			return err
		}
		if !lost || resigned || ctx.Err() != nil {
			return nil
		}
		e.lk.cfg.logger.Info("leadership lost, campaigning again", "role", e.role)
	}
}

// campaign acquires the role, telling observe each leader it sees until
// then. On a backend that keeps waiters in line on the server
// (backend.Queue: ZooKeeper's recipe, as Curator's LeaderLatch uses it) the
// candidate waits in that line, watching only its predecessor, and the
// leader is followed by reads alone: a leader change costs each candidate a
// read, not a write. Elsewhere the candidate retries, and learns the leader
// from the answers.
func (e *Elector) campaign(ctx context.Context) (*Lock, error) {
	if _, ok := e.lk.b.(backend.Queue); !ok {
		return e.lk.acquire(ctx, kindRole, "role", e.role, true, func(h backend.Lease) { e.observe(h.Owner.Instance) })
	}
	type result struct {
		l   *Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := e.lk.acquire(ctx, kindRole, "role", e.role, true, nil)
		got <- result{l, err}
	}()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	leaders := make(chan string)
	go e.followLeader(wctx, leaders)
	for {
		select {
		case r := <-got:
			return r.l, r.err
		case id := <-leaders:
			e.observe(id) // on the Run goroutine, as Callbacks promises
		}
	}
}

// followLeader sends the role's holder on out each time it changes, until
// ctx ends: a release event (the watch is set before the read, so no change
// between them is missed) or, without push events or without a holder, a
// backoff starts the next read.
func (e *Elector) followLeader(ctx context.Context, out chan<- string) {
	bkey := backendKey(e.lk.cfg.namespace, kindRole, e.role)
	n, _ := e.lk.b.(backend.Notifier)
	backoff, last := e.lk.cfg.backoffMin, ""
	for ctx.Err() == nil {
		var changed <-chan struct{}
		if n != nil {
			changed, _ = n.Wait(ctx, bkey)
		}
		l, err := e.lk.b.Get(ctx, bkey)
		if err == nil && l.Owner.Instance != last {
			last = l.Owner.Instance
			select {
			case out <- last:
			case <-ctx.Done():
				return
			}
		}
		if err != nil || changed == nil {
			if sleep(ctx, jitter(backoff)) != nil {
				return
			}
			backoff = min(backoff*2, e.lk.cfg.backoffMax)
			continue
		}
		backoff = e.lk.cfg.backoffMin
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// term runs one term of leadership.
func (e *Elector) term(ctx context.Context, l *Lock, fn func(context.Context) error) (lost, resigned bool, err error) {
	leaderCtx, cancel := context.WithCancelCause(l.Context())
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	done := make(chan struct{})
	e.mu.Lock()
	e.resign, e.termDone = cancel, done
	e.mu.Unlock()

	e.observe(e.lk.cfg.instance)
	var elected time.Time
	if e.lk.cfg.observer != nil {
		elected = time.Now()
	}
	if o := e.lk.cfg.observer; o != nil {
		ev := l.event(EventElected)
		ev.Result = ResultOK
		o.ObserveLock(ev)
	}
	if e.cb.OnElected != nil {
		e.cb.OnElected(l.Token())
	}
	if leaderCtx.Err() == nil {
		err = fn(leaderCtx)
	}
	stop()
	lost = context.Cause(l.Context()) != nil
	resigned = errors.Is(context.Cause(leaderCtx), ErrLeadershipResigned)
	cancel(nil)
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), e.lk.cfg.renewDeadline)
	_ = l.Release(rctx) // on failure the lease expires within its TTL
	rcancel()

	if o := e.lk.cfg.observer; o != nil {
		ev := l.event(EventDemoted)
		ev.Result, ev.Duration = ResultDone, time.Since(elected)
		switch {
		case resigned:
			ev.Result = ResultResigned
		case lost:
			ev.Result, ev.Err = ResultLost, context.Cause(l.Context())
		}
		o.ObserveLock(ev)
	}
	if e.cb.OnDemoted != nil {
		e.cb.OnDemoted()
	}
	e.mu.Lock()
	e.resign, e.termDone = nil, nil
	e.observed = "" // the next observation reports whoever leads next
	e.mu.Unlock()
	close(done) // Resign returns only after OnDemoted ran
	return lost, resigned, err
}

func (e *Elector) observe(identity string) {
	e.mu.Lock()
	changed := identity != e.observed
	e.observed = identity
	e.mu.Unlock()
	if !changed {
		return
	}
	if o := e.lk.cfg.observer; o != nil {
		o.ObserveLock(Event{Kind: EventNewLeader, Backend: e.lk.backendName, Namespace: e.lk.cfg.namespace,
			Role: e.role, Result: ResultOK, Leader: identity})
	}
	if e.cb.OnNewLeader != nil {
		e.cb.OnNewLeader(identity)
	}
}

// Resign steps down if this instance leads: it cancels the leader context,
// waits for the leader's work to return and the role to be released (so the
// next leader can start at once), then returns. Run returns nil afterwards.
// Resign is a no-op when this instance is not leading.
func (e *Elector) Resign(ctx context.Context) error {
	e.mu.Lock()
	cancel, done := e.resign, e.termDone
	e.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel(ErrLeadershipResigned)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Leader reports who holds the role now and under which token, or
// ErrNoLeader.
func (e *Elector) Leader(ctx context.Context) (Leader, error) {
	l, err := e.lk.b.Get(ctx, backendKey(e.lk.cfg.namespace, kindRole, e.role))
	if errors.Is(err, backend.ErrNotFound) {
		return Leader{}, fmt.Errorf("%w for role %q", ErrNoLeader, e.role)
	}
	if err != nil {
		return Leader{}, err
	}
	return Leader{Identity: l.Owner.Instance, Token: Token(l.Token), Remaining: l.Remaining}, nil
}
