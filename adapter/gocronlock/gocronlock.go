// Package gocronlock brings go-co-op/gocron/v2 schedulers onto leasehold
// without rewriting their jobs: a gocron.Locker that claims each
// *occurrence* once in the run ledger, and a gocron.Elector backed by a
// leasehold election.
//
// Why not a plain lock: gocron hands a Locker only the job's name and
// unlocks as soon as the job returns. A fast job on one instance releases
// the name before a slower instance's timer fires, and that instance runs
// the same occurrence again (gocron issue #841). This Locker keys the claim
// by job name and the occurrence's scheduled instant, and an occurrence once
// claimed is never claimed again, however late the other timers fire.
//
// Naming the occurrence. gocron (v2.21) tells a Locker neither the instant
// a timer was set for nor the job's schedule: Lock gets the job's name and
// the job's long-lived context, and Job.NextRun read from inside Lock races
// with gocron's rescheduling, which appends the next instant and prunes past
// ones concurrently (it may answer the due instant or the next one). So the
// Locker works the instant out from the time it is called:
//
//   - NewJobLocker knows the job's own cron spec (the one given to
//     gocron.CronJob) and names the latest scheduled instant at or before
//     the call. Give it to that one job with gocron.WithDistributedJobLocker.
//   - NewLocker knows only a period Q (set it to the spec's resolution: 1 s
//     for a spec with a seconds field, 1 m for a five-field spec, the step
//     for "@every" or "*/N") and names the latest multiple of Q since the
//     Unix epoch at or before the call. It serves every job of a scheduler
//     (gocron.WithDistributedLocker) whose instants are multiples of Q.
//
// Either way the call may come a little early too (a timer counts on the
// monotonic clock, the wall clock can be slewed meanwhile): a call within
// E(t) = min(G/10, 1 s) before an instant t names t, where G is the gap
// between t and the instant before it (Q for NewLocker).
//
// The exact bound: every instance names occurrence s alike — so it runs
// once — if each instance's timer for s fires, by that instance's wall
// clock, no earlier than E(s) before s and earlier than E(s') before the next
// instant s'. Rounding to the nearest multiple of Q (what this package
// did before) put the boundary at s + Q/2, where a 2 ms skew between two
// late timers gave two keys and both ran. A timer later than s' − E(s') names
// s' instead: it does not run s, and claims s' before s' is due (then the
// on-time timers of s' are refused). A clock that is off by more than these
// bounds names the wrong occurrence the same way. The backend also refuses
// a claim for an instant t more than E(t) + 1 s ahead of its own clock.
//
// Use cron-spec jobs (all instances fire at the same instants); a gocron
// DurationJob counts from each scheduler's start, so its instances have no
// common instants to agree on.
package gocronlock

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/schedule"
)

// Locker implements gocron.Locker with per-occurrence claims.
type Locker struct {
	b        backend.Ledger
	instance string
	quantum  time.Duration  // NewLocker: instants are multiples of it
	spec     *schedule.Spec // NewJobLocker: instants are the spec's
	now      func() time.Time
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker over the ledger b for jobs whose instants are
// multiples of quantum since the Unix epoch (1 s for a per-second cron
// job, 1 m for per-minute; see the package comment for the bound). instance
// names this scheduler in the ledger. Prefer NewJobLocker, which knows the
// job's own instants.
func NewLocker(b backend.Ledger, instance string, quantum time.Duration) (*Locker, error) {
	if quantum < 10*time.Millisecond {
		return nil, fmt.Errorf("%w: quantum %v is shorter than 10ms", leasehold.ErrInvalid, quantum)
	}
	return newLocker(b, instance, quantum, nil)
}

// NewJobLocker returns a Locker over the ledger b for the one gocron job
// scheduled by spec in zone (the spec given to gocron.CronJob; zone "" is
// UTC, or set by a "TZ=" prefix as in gocron). Pass it to that job with
// gocron.WithDistributedJobLocker. Each call of Lock claims the latest
// instant of spec at or before the call (see the package comment).
func NewJobLocker(b backend.Ledger, instance, spec, zone string) (*Locker, error) {
	s, err := schedule.Parse(spec, zone)
	if err != nil {
		return nil, fmt.Errorf("%w: spec %q: %w", leasehold.ErrInvalid, spec, err)
	}
	return newLocker(b, instance, 0, s)
}

func newLocker(b backend.Ledger, instance string, quantum time.Duration, spec *schedule.Spec) (*Locker, error) {
	switch {
	case b == nil:
		return nil, fmt.Errorf("%w: ledger is nil", leasehold.ErrInvalid)
	case instance == "":
		return nil, fmt.Errorf("%w: instance is empty", leasehold.ErrInvalid)
	}
	return &Locker{b: b, instance: instance, quantum: quantum, spec: spec, now: time.Now}, nil
}

// Lock claims the occurrence of job key that is due now. It fails (and
// gocron skips the run) if another scheduler claimed it first, or if no
// occurrence is due (a spec with no instant at or before now).
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	now := l.now()
	at, early, err := l.occurrence(now)
	if err != nil {
		return nil, fmt.Errorf("gocronlock: job %q at %v: %w", key, now.UTC(), err)
	}
	c, err := schedule.ClaimOccurrence(ctx, l.b, "gocron/"+key, at,
		schedule.ClaimOptions{Instance: l.instance, MaxEarly: early + time.Second})
	if err != nil {
		return nil, err
	}
	return unlocker{c}, nil
}

// earlyFor is E for an instant whose gap to the one before is gap.
func earlyFor(gap time.Duration) time.Duration { return min(gap/10, time.Second) }

// occurrence names the occurrence due at now and the early allowance E it
// was named with.
func (l *Locker) occurrence(now time.Time) (time.Time, time.Duration, error) {
	if l.spec == nil {
		q := l.quantum.Milliseconds()
		e := earlyFor(l.quantum)
		k := now.Add(e).UnixMilli()
		k -= ((k % q) + q) % q
		return time.UnixMilli(k).UTC(), e, nil
	}
	prev := previous(l.spec, now)
	if prev.IsZero() {
		return time.Time{}, 0, fmt.Errorf("%w: no instant of %q at or before now", leasehold.ErrInvalid, l.spec.String())
	}
	next := l.spec.Next(now)
	if !next.IsZero() {
		if e := earlyFor(next.Sub(prev)); next.Sub(now) <= e {
			return next, e, nil // the timer for next fired a little early
		}
	}
	before := previous(l.spec, prev.Add(-time.Millisecond))
	e := time.Second
	if !before.IsZero() {
		e = earlyFor(prev.Sub(before))
	}
	return prev, e, nil
}

// previous returns the latest instant of s at or before t, or the zero time
// if there is none within five years. Spec has only Next, so it looks
// back over a window that doubles until the window holds an instant.
func previous(s *schedule.Spec, t time.Time) time.Time {
	t = backend.Instant(t)
	for w := time.Second; w < 6*366*24*time.Hour; w *= 2 {
		x := s.Next(t.Add(-w))
		if x.IsZero() {
			return x // none within five years after t-w, so none by t
		}
		if x.After(t) {
			continue
		}
		for {
			n := s.Next(x)
			if n.IsZero() || n.After(t) {
				return x
			}
			x = n
		}
	}
	return time.Time{}
}

type unlocker struct{ c *schedule.Claim }

// Unlock records the occurrence as finished; it is never claimed again.
func (u unlocker) Unlock(ctx context.Context) error { return u.c.Finish(ctx, nil) }

// Elector implements gocron.Elector: IsLeader is nil while this instance
// leads the role.
type Elector struct {
	el      *leasehold.Elector
	leading atomic.Bool
	cancel  context.CancelFunc
	done    chan struct{}
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector campaigns for role on b until Close, under this instance's
// identity (leasehold.WithInstance among opts).
func NewElector(ctx context.Context, b backend.Leases, role string, opts ...leasehold.Option) (*Elector, error) {
	e := &Elector{done: make(chan struct{})}
	el, err := leasehold.NewElector(b, role, leasehold.Callbacks{}, opts...)
	if err != nil {
		return nil, err
	}
	e.el = el
	ctx, e.cancel = context.WithCancel(ctx)
	go func() {
		defer close(e.done)
		_ = el.Run(ctx, func(lctx context.Context) error {
			e.leading.Store(true)
			<-lctx.Done()
			e.leading.Store(false)
			return nil
		})
	}()
	return e, nil
}

// ErrNotLeader is returned by IsLeader on a follower.
var ErrNotLeader = fmt.Errorf("leasehold/gocronlock: not the leader")

// IsLeader returns nil while this instance leads.
func (e *Elector) IsLeader(context.Context) error {
	if !e.leading.Load() {
		return ErrNotLeader
	}
	return nil
}

// Close stops campaigning and resigns.
func (e *Elector) Close(ctx context.Context) error {
	err := e.el.Resign(ctx)
	e.cancel()
	<-e.done
	return err
}
