// Package cronwrap runs robfig/cron/v3 jobs once per occurrence across many
// instances, by claiming each occurrence in leasehold's run ledger under the
// job's name and the instant robfig scheduled it for.
//
// Add schedules the job on a *cron.Cron and, when robfig starts it, reads
// the instant it fired for from the cron's entry (Entry.Prev), so every
// instance names an occurrence alike however late its goroutine runs — as
// long as it runs before the entry's next instant fires (a run later than
// that names the next instant, which is then run once, by whichever claims
// it first; the skipped one is not run twice). Nothing is rounded.
//
// It suits cron-spec jobs, which fire at the same instants on every
// instance. robfig's @every counts from each process's start, so instances
// have no common instants: Add refuses it. Use package schedule, whose
// @every is anchored to the Unix epoch, for those.
package cronwrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/schedule"
)

// Options configure Add. Ledger and Instance are required.
type Options struct {
	Ledger backend.Ledger // the shared run ledger
	// Instance names this process in the ledger.
	Instance string
	// Namespace confines the job's runs (as schedule.NamespaceLedger);
	// "" is leasehold.DefaultNamespace.
	Namespace string
	// Claim tunes each claim (TTL, MaxLate...); its Instance is Instance.
	Claim schedule.ClaimOptions
	// Logger receives an error for every occurrence not run or not
	// recorded because of an error, and a warning for each failed run.
	// Default slog.Default().
	Logger *slog.Logger
	// OnError, if set, is called with every error that kept an
	// occurrence from running here or from being recorded — the backend
	// unreachable, an indeterminate claim, no instant — but not with
	// another instance's claim (backend.ErrClaimed), which is the normal
	// way of not running it. Count it in a metric: such an occurrence may
	// have run nowhere.
	OnError func(job string, at time.Time, err error)
}

// Func is a job run under a claim: ctx is cancelled when the claim's lease
// is lost, and token is the occurrence's fencing token for the sinks it
// writes to. A non-nil error is recorded in the ledger as a failed run.
type Func func(ctx context.Context, token leasehold.Token) error

// Add schedules fn on c under spec (parsed by c's parser, so the spec is
// written once) as the job named job, and runs each of its occurrences
// once across every instance that adds the same job to its cron: an
// occurrence another instance claimed is skipped here. Wrappers in c's
// chain (cron.WithChain) apply around it; put SkipIfStillRunning or
// DelayIfStillRunning there if runs must not overlap on one instance.
func Add(c *cron.Cron, spec, job string, fn Func, o Options) (cron.EntryID, error) {
	switch {
	case c == nil:
		return 0, fmt.Errorf("%w: cron is nil", leasehold.ErrInvalid)
	case fn == nil:
		return 0, fmt.Errorf("%w: job %q: func is nil", leasehold.ErrInvalid, job)
	case o.Ledger == nil:
		return 0, fmt.Errorf("%w: job %q: Options.Ledger is nil", leasehold.ErrInvalid, job)
	case o.Instance == "":
		return 0, fmt.Errorf("%w: job %q: Options.Instance is empty", leasehold.ErrInvalid, job)
	}
	if o.Namespace == "" {
		o.Namespace = leasehold.DefaultNamespace
	}
	if err := leasehold.ValidatePath("namespace", o.Namespace); err != nil {
		return 0, fmt.Errorf("job %q: %w", job, err)
	}
	if err := backend.CheckKey("job name", job); err != nil {
		return 0, err
	}
	if backend.IsJobMeta(job) {
		return 0, fmt.Errorf("%w: job name %q contains %q, which is reserved for job metadata", leasehold.ErrInvalid, job, backend.MetaSep)
	}
	if err := schedule.CheckKeyLengths(o.Namespace, job); err != nil {
		return 0, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Claim.Instance = o.Instance
	w := &wrapped{c: c, job: job, fn: fn, o: o, l: schedule.NamespaceLedger(o.Ledger, o.Namespace)}
	id, err := c.AddJob(spec, w)
	if err != nil {
		return 0, fmt.Errorf("%w: job %q: spec %q: %w", leasehold.ErrInvalid, job, spec, err)
	}
	if _, every := c.Entry(id).Schedule.(cron.ConstantDelaySchedule); every {
		c.Remove(id)
		return 0, fmt.Errorf("%w: job %q: spec %q: %w; use a cron spec (e.g. \"*/10 * * * * *\") or package schedule", leasehold.ErrInvalid, job, spec, ErrSpecEvery)
	}
	w.id.Store(int64(id))
	return id, nil
}

type wrapped struct {
	c   *cron.Cron
	id  atomic.Int64
	job string
	fn  Func
	o   Options
	l   backend.Ledger
}

// Run is called by robfig at each instant: it claims the instant the entry
// fired for and runs the job under the claim.
func (w *wrapped) Run() {
	ctx := context.Background()
	var at time.Time
	if id := w.id.Load(); id != 0 {
		at = w.c.Entry(cron.EntryID(id)).Prev
	}
	if at.IsZero() {
		w.fail(at, "occurrence not run: no scheduled instant", ErrRunNoInstant)
		return
	}
	cl, err := schedule.ClaimOccurrence(ctx, w.l, w.job, at, w.o.Claim)
	if errors.Is(err, backend.ErrOccurrenceClaimed) {
		return // another instance runs it
	}
	if err != nil {
		w.fail(at, "occurrence not run: its claim failed, so it may run nowhere", err)
		return
	}
	finished := false
	defer func() {
		if !finished {
			_ = cl.Finish(ctx, errPanicked) // re-raised for robfig's Recover wrapper
		}
	}()
	runErr := w.fn(cl.Context(), cl.Run().Token)
	finished = true
	if runErr != nil {
		w.o.Logger.Warn("cronwrap: run failed", "job", w.job, "at", at, "token", cl.Run().Token, "err", runErr)
	}
	if err := cl.Finish(ctx, runErr); err != nil {
		w.fail(at, "run's outcome not recorded", err)
	}
}

func (w *wrapped) fail(at time.Time, msg string, err error) {
	w.o.Logger.Error("cronwrap: "+msg, "job", w.job, "namespace", w.o.Namespace, "at", at, "instance", w.o.Instance, "err", err)
	if w.o.OnError != nil {
		w.o.OnError(w.job, at, err)
	}
}

type panicked struct{}

func (panicked) Error() string { return "job panicked" }

var errPanicked error = panicked{}
