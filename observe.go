package leasehold

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// EventKind says what happened to a lock or a role.
type EventKind uint8

// Event kinds reported to an Observer.
const (
	// EventAcquire: a TryAcquire or Acquire call returned (Result says how;
	// Duration is the whole call, waiting included). An Elector's campaign
	// reports one when it wins the role or gives up.
	EventAcquire EventKind = iota + 1
	// EventRenew: the watchdog renewed a lease (Duration: the round trip).
	EventRenew
	// EventRenewFailed: one renewal attempt failed with an error other than
	// "lease lost"; the watchdog retries until the holder's deadline.
	EventRenewFailed
	// EventLost: the holder lost its lease (the backend said so, or its
	// deadline passed without a confirmed renewal). Err is the cause.
	EventLost
	// EventRelease: Release returned (Duration: the backend release).
	EventRelease
	// EventElected: this instance became leader of Role (Token: the term's).
	EventElected
	// EventDemoted: this instance stopped leading Role (Duration: the term;
	// Result: ResultLost, ResultResigned or ResultDone).
	EventDemoted
	// EventNewLeader: the observed leader of Role changed to Leader.
	EventNewLeader
)

var kindNames = [...]string{"", "acquire", "renew", "renew-failed", "lost", "release", "elected", "demoted", "new-leader"}

// String returns the kind's name ("acquire", "renew-failed", ...).
func (k EventKind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return "unknown"
}

// Results reported in Event.Result.
const (
	ResultOK            = "ok"            // acquired, renewed, released, elected
	ResultHeld          = "held"          // TryAcquire found the key held
	ResultIndeterminate = "indeterminate" // the outcome cannot be known
	ResultCanceled      = "canceled"      // the caller's context ended first
	ResultInvalid       = "invalid"       // bad input or a closed backend
	ResultError         = "error"         // any other failure
	ResultLost          = "lost"          // demoted: the lease was lost
	ResultResigned      = "resigned"      // demoted: Resign was called
	ResultDone          = "done"          // demoted: the leader's work returned or Run's context ended
)

// Event is one thing that happened to a lock or an election role.
type Event struct {
	Kind      EventKind
	Backend   string // the backend's Capabilities().Name
	Namespace string
	Key       string // the lock key; empty for election events
	Role      string // the election role; empty for plain locks
	Token     Token  // the grant's fencing token (0 when none was granted)
	Result    string // one of the Result* constants
	Duration  time.Duration
	Leader    string // EventNewLeader: the new leader's identity
	Err       error  // the failure, if any
}

// Observer is told about lock and election events, for metrics or logs.
//
// ObserveLock is called synchronously on the goroutine where the event
// happened (a caller, a watchdog, an Elector's Run), never while a lock of
// this package is held. It must return quickly and must not block: a slow
// observer delays renewals. It must not call back into the Lock or Elector
// it is told about.
type Observer interface {
	ObserveLock(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// ObserveLock calls f(ev).
func (f ObserverFunc) ObserveLock(ev Event) { f(ev) }

// WithObserver sets an Observer told about acquires, renewals, losses,
// releases and leadership changes (default: none, at no cost; nil is none).
// A Locker or an Elector only: a Scheduler takes schedule.WithObserver.
func WithObserver(o Observer) Option {
	return own("WithObserver", func(c *config) error { c.observer = o; return nil })
}

// acquireResult classifies the error of an acquire call.
func acquireResult(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return ResultOK
	case errors.Is(err, backend.ErrLeaseHeld):
		return ResultHeld
	case errors.Is(err, ErrOutcomeIndeterminate):
		return ResultIndeterminate
	case errors.Is(err, ErrInvalid), errors.Is(err, backend.ErrClosed):
		return ResultInvalid
	case ctx.Err() != nil:
		// Including ErrLockNotAcquired after waiting: in this process's queue,
		// or for a request that was never sent.
		return ResultCanceled
	case errors.Is(err, ErrLockNotAcquired):
		return ResultHeld
	}
	return ResultError
}

// event returns the fields every event of this lock shares.
func (l *Lock) event(kind EventKind) Event {
	ev := Event{Kind: kind, Backend: l.lk.backendName, Namespace: l.lk.cfg.namespace, Token: l.token}
	if l.kind == kindRole {
		ev.Role = l.key
	} else {
		ev.Key = l.key
	}
	return ev
}

func releaseResult(err error) string {
	switch {
	case err == nil:
		return ResultOK
	case errors.Is(err, ErrOutcomeIndeterminate):
		return ResultIndeterminate
	case errors.Is(err, ErrInvalid), errors.Is(err, backend.ErrClosed):
		return ResultInvalid
	}
	return ResultError
}
