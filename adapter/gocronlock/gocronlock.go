// Package gocronlock brings go-co-op/gocron/v2 schedulers onto leasehold
// without rewriting their jobs: a gocron.Locker that claims each
// *occurrence* once in the run ledger, and a gocron.Elector backed by a
// leasehold election.
//
// Why not a plain lock: gocron hands a Locker only the job's name and
// unlocks as soon as the job returns. A fast job on one instance releases
// the name before a slower instance's timer fires, and that instance runs
// the same occurrence again (gocron issue #841). This Locker keys the claim
// by job name and the occurrence's instant — the firing time rounded to the
// job's period (Quantum) — and an occurrence once claimed is never claimed
// again, however late the other timers fire, as long as they fire within
// Quantum/2 of the true instant. Use it with cron-spec jobs (all instances
// fire at the same instants); a gocron DurationJob counts from each
// scheduler's start, so its instances have no common instants to agree on.
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
	b       backend.Ledger
	quantum time.Duration
	opts    schedule.ClaimOptions
	now     func() time.Time
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker over the ledger b. quantum is the period of
// the jobs it serves (1 s for a per-second cron job, 1 m for per-minute): a
// firing time is rounded to it to name the occurrence. instance names this
// scheduler in the ledger.
func NewLocker(b backend.Ledger, instance string, quantum time.Duration) (*Locker, error) {
	switch {
	case b == nil:
		return nil, fmt.Errorf("%w: ledger is nil", leasehold.ErrInvalid)
	case quantum < 10*time.Millisecond:
		return nil, fmt.Errorf("%w: quantum %v is shorter than 10ms", leasehold.ErrInvalid, quantum)
	case instance == "":
		return nil, fmt.Errorf("%w: instance is empty", leasehold.ErrInvalid)
	}
	return &Locker{b: b, quantum: quantum, now: time.Now,
		opts: schedule.ClaimOptions{Instance: instance, MaxEarly: quantum / 2}}, nil
}

// Lock claims the occurrence of job key that is due now. It fails (and
// gocron skips the run) if another scheduler claimed it first.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	at := l.now().Round(l.quantum)
	c, err := schedule.ClaimOccurrence(ctx, l.b, "gocron/"+key, at, l.opts)
	if err != nil {
		return nil, err
	}
	return unlocker{c}, nil
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
