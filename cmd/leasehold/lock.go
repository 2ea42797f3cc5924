package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/supervisor"
)

// releaseTimeout bounds the release of the lock after the command exited.
// If it runs out, the lease expires on its own within its TTL.
const releaseTimeout = 10 * time.Second

// minLockTTL is the shortest --ttl: a shorter lease may expire before the
// grant's reply arrives and the command starts.
const minLockTTL = 100 * time.Millisecond

// lockOptions are the flags of "leasehold lock".
type lockOptions struct {
	ttl       time.Duration
	wait      time.Duration
	nonblock  bool
	killGrace time.Duration
}

func newLockCmd(a *app) *cobra.Command {
	var o lockOptions
	cmd := &cobra.Command{
		Use:   "lock [flags] KEY -- CMD [ARGS...]",
		Short: "Run a command while holding a cluster-wide lock (flock(1) for a cluster)",
		Long: `Acquire the lock KEY, run CMD with ARGS while holding it, release it, and
exit with CMD's exit code.

KEY is a path of segments separated by "/" (each 1–128 characters from
[A-Za-z0-9._-]). CMD is run directly, without a shell, with stdin, stdout and
stderr passed through and these variables added to its environment:

  LEASEHOLD_TOKEN      the fencing token of this grant: greater than every token
                       granted before on KEY. Pass it to the resource you
                       change and have it reject tokens lower than the highest
                       it has seen.
  LEASEHOLD_KEY        KEY
  LEASEHOLD_NAMESPACE  the namespace
  LEASEHOLD_INSTANCE   the instance name

The lease (--ttl) is renewed every TTL/3 while CMD runs. CMD runs under a
supervisor process that owns its whole process tree: on Linux the subreaper
of CMD's descendants (even those that call setsid), with a cgroup v2 leaf
when one can be created, else CMD's process group ("leasehold doctor" says
which); elsewhere CMD's process group. When leasehold is about to lose the
certainty that it holds the lease (its local deadline is less than
--kill-grace away, which happens only when renewals fail), it sends SIGTERM
to the tree; when the deadline passes or the lease is found lost, the tree is
SIGKILLed at once, before the backend lets anyone else take the key, and
leasehold exits 76. The deadline is enforced by the supervisor, which is sent
each renewed deadline: it holds even while leasehold is paused (SIGSTOP) or
starved. SIGINT, SIGTERM and SIGHUP received by leasehold are forwarded to
the tree. When CMD exits, what it left running is killed, and the lock is
released only once nothing of the tree remains. If leasehold itself is
killed, even with SIGKILL, the supervisor kills the whole tree at once. CMD
gets stdin, stdout and stderr and no other descriptor. Not reached: a
descendant that gains another user's rights or leaves the tree's cgroup, or
everything if leasehold and the supervisor are both killed or stopped (see
docs/security.md); run leasehold in its own cgroup (systemd-run --scope) for
full containment. Because CMD is not in the terminal's foreground process
group, an interactive CMD that reads from the terminal is stopped (SIGTTIN).

This guarantees that the backend never grants KEY to two holders with
unexpired leases and that CMD is killed when its lease can no longer be
trusted. It cannot stop a paused or slow CMD from acting after that: only a
resource that checks LEASEHOLD_TOKEN is protected from a stale holder.

` + exitCodesHelp + `
  128+N         leasehold was interrupted by signal N while waiting for KEY`,
		Example: `  leasehold lock nightly/backup -- /usr/local/bin/backup --full
  leasehold lock --nonblock --ttl 1m reports -- sh -c 'make-report --fence "$LEASEHOLD_TOKEN"'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 || len(args) < 2 {
				return usageErrorf("usage: leasehold lock [flags] KEY -- CMD [ARGS...] (one KEY, then --, then the command)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("kill-grace") {
				o.killGrace = min(o.ttl/5, 5*time.Second)
			}
			if err := o.validate(cmd.Flags().Changed("wait")); err != nil {
				return err
			}
			return a.lock(cmd.Context(), o, args[0], args[1:])
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.ttl, "ttl", leasehold.DefaultTTL, "lease `duration`; renewed every TTL/3 while the command runs")
	f.DurationVar(&o.wait, "wait", 0, "give up (exit 75) if the lock is not acquired within this `duration` (0: wait forever)")
	f.BoolVar(&o.nonblock, "nonblock", false, "fail at once (exit 75) if the lock is held")
	f.DurationVar(&o.killGrace, "kill-grace", 0, "send SIGTERM when the lease's local deadline is this `duration` away (default min(TTL/5, 5s); 0: never)")
	return cmd
}

func (o *lockOptions) validate(waitSet bool) error {
	switch {
	case o.ttl <= 0:
		return usageErrorf("--ttl %q: must be positive", o.ttl)
	case o.ttl < minLockTTL:
		return usageErrorf("--ttl %q: must be at least %v (a shorter lease can expire before the command starts)", o.ttl, minLockTTL)
	case o.ttl > backend.MaxTTL:
		return usageErrorf("--ttl %q: must be at most %v", o.ttl, backend.MaxTTL)
	case o.wait < 0:
		return usageErrorf("--wait %q: must not be negative", o.wait)
	case o.nonblock && waitSet:
		return usageErrorf("--nonblock and --wait %q: give one or the other", o.wait)
	case o.killGrace < 0 || o.killGrace >= o.ttl:
		return usageErrorf("--kill-grace %q: must be at least 0 and shorter than --ttl %v", o.killGrace, o.ttl)
	}
	return nil
}

// lock is "leasehold lock".
func (a *app) lock(ctx context.Context, o lockOptions, key string, argv []string) error {
	if err := leasehold.ValidatePath("key", key); err != nil {
		return usageErrorf("%v", err)
	}
	b, err := a.openBackend(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	// renewed is told each confirmed renewal, whose deadline is passed on
	// to the command's supervisor.
	renewed := make(chan struct{}, 1)
	lk, err := leasehold.NewLocker(b,
		leasehold.WithTTL(o.ttl), leasehold.WithNamespace(a.namespace), leasehold.WithInstance(a.instance),
		leasehold.WithObserver(leasehold.ObserverFunc(func(ev leasehold.Event) {
			if ev.Kind == leasehold.EventRenew && ev.Result == leasehold.ResultOK {
				select {
				case renewed <- struct{}{}:
				default:
				}
			}
		})))
	if errors.Is(err, leasehold.ErrInvalid) {
		return usageErrorf("--ttl %q: %v", o.ttl, err)
	} else if err != nil {
		return err
	}

	sigCh := make(chan os.Signal, 8)
	signal.Notify(sigCh, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigCh)

	// The command's supervisor is started while the lock is acquired, so
	// that its start-up does not delay the command once the lease is held.
	spare, err := supervisor.Spawn(supervisor.Options{Stdin: a.stdin, Stdout: a.stdout, Stderr: a.stderr})
	if err != nil {
		return &exitError{code: ExitInternal, err: err}
	}
	defer spare.Close() // if unused
	l, err := a.acquire(ctx, lk, o, key, sigCh)
	if err != nil {
		return err
	}
	return a.runHolding(l, o, argv, sigCh, renewed, spare)
}

// acquire acquires key as the flags say. A signal from sigCh interrupts the
// wait.
func (a *app) acquire(ctx context.Context, lk *leasehold.Locker, o lockOptions, key string, sigCh <-chan os.Signal) (*leasehold.Lock, error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	wctx := actx
	if o.wait > 0 {
		var wcancel context.CancelFunc
		wctx, wcancel = context.WithTimeout(actx, o.wait)
		defer wcancel()
	}
	type result struct {
		l   *leasehold.Lock
		err error
	}
	resCh := make(chan result, 1)
	go func() {
		var r result
		if o.nonblock {
			r.l, r.err = lk.TryAcquire(wctx, key)
		} else {
			r.l, r.err = lk.Acquire(wctx, key)
		}
		resCh <- r
	}()
	var (
		sig os.Signal
		r   result
	)
	select {
	case r = <-resCh:
	case sig = <-sigCh:
		cancel()
		r = <-resCh
	}
	if sig != nil {
		if r.l != nil {
			releaseLock(a, r.l)
		}
		return nil, &exitError{code: 128 + signum(sig), err: fmt.Errorf("interrupted by %v while waiting for key %q", sig, key)}
	}
	if r.err == nil {
		return r.l, nil
	}
	var held *backend.HeldError
	switch {
	case errors.As(r.err, &held):
		return nil, &exitError{code: ExitNotAcquired, err: fmt.Errorf("key %q is held by %s (token %d); not acquired",
			key, held.Holder.Owner.Instance, held.Holder.Token)}
	case o.wait > 0 && errors.Is(wctx.Err(), context.DeadlineExceeded) && actx.Err() == nil:
		msg := fmt.Errorf("key %q not acquired within --wait %v", key, o.wait)
		if errors.Is(r.err, leasehold.ErrOutcomeIndeterminate) {
			msg = fmt.Errorf("%w (the last attempt's outcome is unknown: a grant it made expires within --ttl %v)", msg, o.ttl)
		}
		return nil, &exitError{code: ExitNotAcquired, err: msg}
	case errors.Is(r.err, leasehold.ErrInvalid):
		return nil, usageErrorf("%v", r.err)
	}
	return nil, &exitError{code: ExitInternal, err: fmt.Errorf("acquire key %q: %w", key, r.err)}
}

// runHolding runs argv while holding l, under a supervisor process
// (internal/supervisor) that owns the command's whole tree and enforces
// the lease's deadline itself — it is sent each renewed deadline, and it
// kills the tree when the deadline passes without one, or at once if
// leasehold dies — then releases l once nothing of the tree remains.
func (a *app) runHolding(l *leasehold.Lock, o lockOptions, argv []string, sigCh <-chan os.Signal, renewed <-chan struct{}, spare *supervisor.Spare) error {
	env := append(os.Environ(),
		"LEASEHOLD_TOKEN="+l.Token().String(),
		"LEASEHOLD_KEY="+l.Key(),
		"LEASEHOLD_NAMESPACE="+a.namespace,
		"LEASEHOLD_INSTANCE="+a.instance,
	)
	var h *supervisor.Handle
	err := context.Cause(l.Context())
	if err == nil {
		h, err = spare.Start(supervisor.Spec{Argv: argv, Env: env}, l.Deadline(), o.ttl)
	}
	if err != nil {
		lost := errors.Is(err, leasehold.ErrLeaseLost)
		releaseLock(a, l)
		switch {
		case lost:
			return &exitError{code: ExitLeaseLost, err: fmt.Errorf("key %q, token %s: lease lost before the command started: %w", l.Key(), l.Token(), err)}
		case errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist):
			return &exitError{code: ExitNotFound, err: err}
		default:
			return &exitError{code: ExitCannotExec, err: err}
		}
	}

	// graceTimer fires when the deadline is --kill-grace away, as last
	// known; renewals move the deadline, so it is checked again then.
	var graceC <-chan time.Time
	var graceTimer *time.Timer
	if o.killGrace > 0 {
		graceTimer = time.NewTimer(time.Until(l.Deadline()) - o.killGrace)
		defer graceTimer.Stop()
		graceC = graceTimer.C
	}
	var (
		lostCh = l.Done()
		lost   bool
	)
	warn := func(what string, err error) {
		if err != nil && !errors.Is(err, os.ErrClosed) {
			fmt.Fprintf(a.stderr, "leasehold: %s: %v\n", what, err)
		}
	}
loop:
	for {
		// A lost lease is handled before anything else that is ready.
		select {
		case <-lostCh:
			lost, lostCh = true, nil
			warn("kill the command", h.Kill())
		default:
		}
		select {
		case <-h.Done():
			break loop
		case <-lostCh:
			lost, lostCh = true, nil
			warn("kill the command", h.Kill())
		case <-renewed:
			warn("pass the renewed deadline to the command's supervisor", h.SetDeadline(l.Deadline()))
		case s := <-sigCh:
			warn(fmt.Sprintf("forward %v to the command", s), h.Signal(s))
		case <-graceC:
			// Renewals move the deadline: check it again.
			if left := time.Until(l.Deadline()); left > o.killGrace {
				graceTimer.Reset(left - o.killGrace)
			} else {
				graceC = nil
				fmt.Fprintf(a.stderr, "leasehold: key %q, token %s: lease deadline in %v without a confirmed renewal; sending SIGTERM to the command\n",
					l.Key(), l.Token(), left.Round(time.Millisecond))
				warn("send SIGTERM to the command", h.Signal(syscall.SIGTERM))
			}
		}
	}
	// The supervisor has confirmed that nothing of the command's tree
	// remains (what the command left running was killed): only now is the
	// lock released.
	res := h.Wait()
	if res.Leftovers > 0 {
		fmt.Fprintf(a.stderr, "leasehold: the command exited leaving %d process(es) running; they were killed before the lock was released\n", res.Leftovers)
	}
	if res.Killed != "" {
		fmt.Fprintf(a.stderr, "leasehold: the command's supervisor killed it: %s\n", res.Killed)
	}
	// The command may have exited just as the lease was lost: then nobody can
	// tell whether it finished in time, so the loss wins.
	cause := context.Cause(l.Context())
	if !lost && cause != nil {
		lost = true
	}
	releaseLock(a, l)
	if lost {
		return &exitError{code: ExitLeaseLost, err: fmt.Errorf("key %q, token %s: lease lost while the command ran; the command was killed: %v",
			l.Key(), l.Token(), cause)}
	}
	return exitStatus(res.Err)
}

// exitStatus turns the command's Wait error into leasehold's exit.
func exitStatus(waitErr error) error {
	if waitErr == nil {
		return nil
	}
	var ee *supervisor.ExitError
	if !errors.As(waitErr, &ee) {
		return &exitError{code: ExitInternal, err: fmt.Errorf("wait for the command: %w", waitErr)}
	}
	if ee.Signal != 0 {
		return &exitError{code: 128 + ee.Signal}
	}
	return &exitError{code: ee.Code}
}

// releaseLock releases l with a bounded timeout, warning on failure.
func releaseLock(a *app, l *leasehold.Lock) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := l.Release(ctx); err != nil {
		fmt.Fprintf(a.stderr, "leasehold: release key %q, token %s: %v (the lease expires on its own)\n", l.Key(), l.Token(), err)
	}
}

func signum(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 0
}
