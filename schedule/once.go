package schedule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
)

// OncePrefix starts the ledger job name under which RunOnce keeps a key:
// key "order-42" is the run "once/order-42" (in the namespace's ledger), so
// `leasehold runs` lists it like any run.
const OncePrefix = "once/"

// onceInstant is the scheduled instant every RunOnce key is claimed at: a key
// has one occurrence, not one per instant.
var onceInstant = time.Unix(0, 0).UTC()

// OnceOptions tune RunOnce. The zero value takes the defaults.
type OnceOptions struct {
	// Namespace confines the key (as NamespaceLedger); "" is
	// leasehold.DefaultNamespace.
	Namespace string
	// Claim tunes the claim (its Instance names this process in the
	// ledger; TTL is the lease the heartbeats keep while fn runs).
	Claim ClaimOptions
}

// RunOnce runs fn at most once per key across every instance that shares the
// ledger b, for as long as the key's run is kept (until a Prune removes it:
// the retention window). It is the "no duplicate notification" of a
// consumer that may be handed the same message twice: claim the message's
// id, then act.
//
// The claim is exactly once; fn's effects are not: fn may be cut short (its
// ctx is cancelled when the claim's lease is lost, e.g. by a partition, or
// when the caller's ctx ends — a cancelled run is recorded as the key's one,
// failed, run) after some of its effects happened, and the key is then never
// run again. Make
// the effects idempotent, or pass token to a sink that rejects lower tokens.
//
// Outcomes, as for ClaimOccurrence:
//   - nil: fn ran here and returned nil, and the success is recorded.
//   - an error wrapping ErrOnceFailed and fn's error: fn ran here and failed
//     (recorded as failed; not run again).
//   - *backend.ClaimedError (errors.Is backend.ErrClaimed): another call
//     claimed the key first; its Run tells whether it is still running,
//     succeeded, failed or was abandoned. fn did not run here.
//   - ErrOnceAbandoned: another call claimed the key and its lease expired
//     with no outcome recorded (its runner died); RunOnce recorded the run
//     as abandoned (later calls get the abandoned record) and fn did not
//     run here: maybe done.
//   - leasehold.ErrIndeterminate: the backend did not answer whether the
//     claim was made. fn did not run here, and the key may now be held by
//     this call until its lease expires, never to run: treat it as "maybe
//     done" and alert, or check the key's run later.
//   - leasehold.ErrInvalid: the key is empty, too long for a ledger name
//     (backend.MaxKeyLen with the prefix and namespace), not UTF-8, or holds
//     a control character or backend.MetaSep; hash such an id.
//   - leasehold.ErrInvalid too for Claim.MaxLate other than 0: a key has no
//     instant to be late for.
//   - after fn ran, an error recording its outcome (ErrLeaseLost,
//     ErrIndeterminate): fn ran, its outcome may be missing from the ledger.
func RunOnce(ctx context.Context, b backend.Ledger, key string, fn func(ctx context.Context, token leasehold.Token) error, o OnceOptions) error {
	if b == nil {
		return fmt.Errorf("%w: ledger is nil", leasehold.ErrInvalid)
	}
	if fn == nil {
		return fmt.Errorf("%w: once function for key %q is nil", leasehold.ErrInvalid, key)
	}
	if key == "" {
		return fmt.Errorf("%w: once key is empty", leasehold.ErrInvalid)
	}
	if o.Claim.MaxLate != 0 {
		return fmt.Errorf("%w: once key %q: Claim.MaxLate %v: a key has no instant to be late for (leave it 0)", leasehold.ErrInvalid, key, o.Claim.MaxLate)
	}
	if o.Namespace == "" {
		o.Namespace = leasehold.DefaultNamespace
	}
	l := NamespaceLedger(b, o.Namespace)
	c, err := ClaimOccurrence(ctx, l, OncePrefix+key, onceInstant, o.Claim)
	var ce *backend.ClaimedError
	if errors.As(err, &ce) && ce.Run.State == backend.Running {
		// No sweep recovers a once key: a runner that died would leave it
		// "running" for ever. The ledger abandons it only once its lease
		// has expired (else ErrNotExpired: it is still running).
		if _, aerr := l.Abandon(ctx, OncePrefix+key, onceInstant); aerr == nil {
			return fmt.Errorf("once key %q: %w (its runner %s, token %d, let its lease expire)", key, ErrOnceAbandoned, ce.Run.Owner.Instance, ce.Run.Token)
		}
	}
	if err != nil {
		return fmt.Errorf("once key %q: %w", key, err)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.Context(), func() { cancel(context.Cause(c.Context())) })
	runErr := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				_ = c.Finish(context.WithoutCancel(ctx), fmt.Errorf("panic: %v", p))
				panic(p)
			}
		}()
		return fn(rctx, c.Run().Token)
	}()
	stop()
	cancel(nil)
	if ferr := c.Finish(context.WithoutCancel(ctx), runErr); ferr != nil {
		if runErr != nil {
			return fmt.Errorf("once key %q: %w: %w (and its outcome was not recorded: %w)", key, ErrOnceFailed, runErr, ferr)
		}
		return fmt.Errorf("once key %q: ran, but its outcome was not recorded: %w", key, ferr)
	}
	if runErr != nil {
		return fmt.Errorf("once key %q: %w: %w", key, ErrOnceFailed, runErr)
	}
	return nil
}
