// Package guard is what every backend does around its storage, written
// once. A Guard checks a call's arguments (the backend.Check* rules) and
// cleans its texts, answers backend.ErrClosed after Close before anything
// is sent, names a call's failures ("redis: acquire key \"k\": …"), gives
// the bare answers backend.ErrLeaseLost and backend.ErrNotFound the key or
// occurrence and token they are about, and pages ListRuns. A backend
// supplies the steps — its storage and atomic operations, over arguments
// already checked — and each of its exported methods hands its step to the
// Guard: a rule changed here changes for every backend.
//
// A step's error is one of:
//   - the bare backend.ErrLeaseLost or backend.ErrNotFound: the Guard says
//     which key or occurrence (and token) the answer is about;
//   - an error that already is an answer (see Answer): returned as it is,
//     but for a failure that only matches backend.ErrClosed (the backend
//     closed while the call ran), which is named like any failure;
//   - anything else, a failure: returned wrapped, named "<Name>: <call>".
//
// A call's values are returned with its error as its step returned them
// (a Reclaim answered ErrLeaseLost still says which run).
//
// The order of the checks is the rule for every backend: the arguments,
// then the closed state, then (in the step) the context: a call with an
// ended context on a closed backend answers ErrClosed.
package guard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// Guard holds what a backend's calls are checked against.
type Guard struct {
	// Name prefixes a call's failures: "redis", "etcd", ….
	Name string
	// MinTTL is the backend's shortest lease or runner's lease.
	MinTTL time.Duration
	// Closed returns backend.ErrClosed once the backend is closed and nil
	// before. It must not block: a call that must hold the backend open
	// while it runs (see closegate.Gate.Enter) does so in its step.
	Closed func() error
}

// answers are the errors that say what became of a request, which a Guard
// returns as they are: the definite answers of the contract, and the
// request-level ErrInvalid and ErrClosed.
var answers = []error{
	backend.ErrInvalid, backend.ErrClosed,
	backend.ErrLeaseHeld, backend.ErrLeaseLost, backend.ErrLeaseNotExpired, backend.ErrNotFound,
	backend.ErrOccurrenceClaimed, backend.ErrOccurrenceExhausted, backend.ErrOccurrenceOverlap,
	backend.ErrOccurrenceTooEarly, backend.ErrOccurrenceTooLate,
}

// Answer reports whether err says what became of the request (a definite
// answer, ErrInvalid or ErrClosed) rather than that the call failed.
func Answer(err error) bool {
	for _, a := range answers {
		if errors.Is(err, a) {
			return true
		}
	}
	return false
}

// closed runs g.Closed, if set.
func (g *Guard) closed() error {
	if g.Closed == nil {
		return nil
	}
	return g.Closed()
}

// call describes a call for its error's text, which is made only when the
// call failed (a call that succeeds formats nothing).
type call struct {
	op      string    // what it does: "acquire", "renew", "high-water mark of", …
	subject string    // what name is: "key", "prefix", "job" (with at: an occurrence); "": all runs
	name    string    // the key, prefix or job
	at      time.Time // with name the job: the occurrence's instant
	token   uint64    // the token the call holds, if any
	seq     int64     // with hasSeq: the record's seq (name is the record's)
	hasSeq  bool
}

// about is what the call is about: `key "k"`, `job "j" at …`, `runs`, and
// the token it holds.
func (c call) about() string {
	var s string
	switch {
	case !c.at.IsZero():
		s = backend.FormatOccurrence(c.name, c.at)
	case c.hasSeq:
		s = fmt.Sprintf("%s %q seq %d", c.subject, c.name, c.seq)
	case c.subject == "records":
		s = "records"
	case c.subject != "":
		s = fmt.Sprintf("%s %q", c.subject, c.name)
	default:
		s = "runs"
	}
	if c.token != 0 {
		s += fmt.Sprintf(", token %d", c.token)
	}
	return s
}

// fail names err, a step's error in call c, as the package doc says.
func (g *Guard) fail(err error, c call) error {
	switch {
	case err == nil:
		return nil
	case err == backend.ErrLeaseLost || err == backend.ErrNotFound:
		return fmt.Errorf("%w: %s", err, c.about())
	case Answer(err) && (err == backend.ErrClosed || !errors.Is(err, backend.ErrClosed)):
		return err
	}
	return fmt.Errorf("%s: %s %s: %w", g.Name, c.op, c.about(), err)
}

// Acquire checks Acquire's arguments and runs step.
func (g *Guard) Acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration,
	step func(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error)) (backend.Grant, error) {
	if err := backend.CheckLease(key, owner, ttl, g.MinTTL); err != nil {
		return backend.Grant{}, err
	}
	if err := g.closed(); err != nil {
		return backend.Grant{}, err
	}
	gr, err := step(ctx, key, owner, ttl)
	return gr, g.fail(err, call{op: "acquire", subject: "key", name: key})
}

// AcquireQueued checks AcquireQueued's arguments and runs step.
func (g *Guard) AcquireQueued(ctx context.Context, key string, owner backend.Owner, ttl time.Duration,
	step func(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, time.Time, error)) (backend.Grant, time.Time, error) {
	if err := backend.CheckLease(key, owner, ttl, g.MinTTL); err != nil {
		return backend.Grant{}, time.Time{}, err
	}
	if err := g.closed(); err != nil {
		return backend.Grant{}, time.Time{}, err
	}
	gr, sent, err := step(ctx, key, owner, ttl)
	return gr, sent, g.fail(err, call{op: "acquire (queued)", subject: "key", name: key})
}

// Renew checks Renew's arguments and runs step.
func (g *Guard) Renew(ctx context.Context, req backend.RenewRequest,
	step func(ctx context.Context, req backend.RenewRequest) (backend.Grant, error)) (backend.Grant, error) {
	if err := backend.CheckRenew(req, g.MinTTL); err != nil {
		return backend.Grant{}, err
	}
	if err := g.closed(); err != nil {
		return backend.Grant{}, err
	}
	gr, err := step(ctx, req)
	return gr, g.fail(err, call{op: "renew", subject: "key", name: req.Key, token: req.Token})
}

// Release checks Release's arguments and runs step.
func (g *Guard) Release(ctx context.Context, key string, owner backend.Owner, token uint64,
	step func(ctx context.Context, key string, owner backend.Owner, token uint64) error) error {
	if err := backend.CheckRelease(key, owner, token); err != nil {
		return err
	}
	if err := g.closed(); err != nil {
		return err
	}
	return g.fail(step(ctx, key, owner, token), call{op: "release", subject: "key", name: key, token: token})
}

// Get checks Get's argument and runs step.
func (g *Guard) Get(ctx context.Context, key string,
	step func(ctx context.Context, key string) (backend.Lease, error)) (backend.Lease, error) {
	if err := backend.CheckKey("key", key); err != nil {
		return backend.Lease{}, err
	}
	if err := g.closed(); err != nil {
		return backend.Lease{}, err
	}
	l, err := step(ctx, key)
	return l, g.fail(err, call{op: "get", subject: "key", name: key})
}

// List runs step, except for a prefix no key can start with (one holding
// NUL): that lists nothing without asking the store.
func (g *Guard) List(ctx context.Context, prefix string, limit int,
	step func(ctx context.Context, prefix string, limit int) ([]backend.Lease, error)) ([]backend.Lease, error) {
	if err := g.closed(); err != nil {
		return nil, err
	}
	if strings.IndexByte(prefix, 0) >= 0 {
		return nil, nil
	}
	ls, err := step(ctx, prefix, max(limit, 0))
	return ls, g.fail(err, call{op: "list", subject: "prefix", name: prefix})
}

// Wait checks Wait's argument and runs step.
func (g *Guard) Wait(ctx context.Context, key string,
	step func(ctx context.Context, key string) (<-chan struct{}, error)) (<-chan struct{}, error) {
	if err := backend.CheckKey("key", key); err != nil {
		return nil, err
	}
	if err := g.closed(); err != nil {
		return nil, err
	}
	ch, err := step(ctx, key)
	return ch, g.fail(err, call{op: "wait for", subject: "key", name: key})
}
