package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/chaos/history"
	"github.com/leasehold/leasehold/internal/childproc"
	"github.com/leasehold/leasehold/internal/open"
	"github.com/leasehold/leasehold/schedule"
)

// EnvWorker is the environment variable through which the harness hands a
// worker process its WorkerConfig (JSON). A program that can be a worker
// calls WorkerFromEnv first thing.
const EnvWorker = "LEASEHOLD_CHAOS_WORKER"

// JobName is the scheduled job every worker registers.
const JobName = "chaos"

// LimitedJob is the second job every worker registers: MaxConcurrent 1,
// due every 250 ms and working 300 ms, so that its claims contend for the
// limit all the time; the trigger fault triggers it. It writes no effects:
// the checker counts its executions.
const (
	LimitedJob   = "limited"
	LimitedEvery = 250 * time.Millisecond
	LimitedWork  = 300 * time.Millisecond
	LimitedMax   = 1
)

// WorkerConfig is what one worker process runs.
type WorkerConfig struct {
	Name       string        `json:"name"`
	BackendURL string        `json:"backend"`
	Broken     bool          `json:"broken,omitempty"` // wrap the backend in the negative control
	Namespace  string        `json:"namespace"`
	History    string        `json:"history"`  // shared history file
	Unfenced   string        `json:"unfenced"` // shared unfenced effect log
	SinkSock   string        `json:"sink"`     // fenced sink socket
	RateFile   string        `json:"rate_file"`
	JobEvery   time.Duration `json:"job_every"`
	JobWork    time.Duration `json:"job_work"`
	JobTTL     time.Duration `json:"job_ttl"`
	JobGrace   time.Duration `json:"job_grace"`   // misfire grace of both jobs (policy skip)
	JobTimeout time.Duration `json:"job_timeout"` // timeout of both jobs
	LockKeys   []string      `json:"lock_keys"`
	LockTTL    time.Duration `json:"lock_ttl"`
	LockHold   time.Duration `json:"lock_hold"`
}

// WorkerFromEnv runs a worker and reports (exit code, true) if EnvWorker is
// set, else (0, false).
func WorkerFromEnv() (int, bool) {
	raw := os.Getenv(EnvWorker)
	if raw == "" {
		return 0, false
	}
	var cfg WorkerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "chaos worker: bad %s: %v\n", EnvWorker, err)
		return 2, true
	}
	return RunWorker(cfg), true
}

// RunWorker is a worker process's main: a scheduler running a job every
// cfg.JobEvery in once mode with crash policy retry, and a lock workload on
// cfg.LockKeys, both over the real library code and the backend at
// cfg.BackendURL, until SIGTERM. It returns the exit code.
//
// Both workloads write each effect first to the unfenced log and then to
// the fenced sink with their token. Neither checks its context between its
// work and its writes: they model the holder that a pause (GC, SIGSTOP)
// catches between its last check and its write, the case only fencing
// catches.
func RunWorker(cfg WorkerConfig) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("worker", cfg.Name)
	rates := make(chan os.Signal, 1)
	signal.Notify(rates, childproc.SigUsr1) // first: SIGUSR1's default action is to exit
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	h, err := history.Create(cfg.History, cfg.Name)
	if err != nil {
		log.Error("history", "err", err)
		return 2
	}
	defer h.Close()
	unfenced, err := history.Create(cfg.Unfenced, cfg.Name)
	if err != nil {
		log.Error("unfenced log", "err", err)
		return 2
	}
	defer unfenced.Close()

	var b backend.Backend
	for attempt := 0; ; attempt++ { // the backend may be restarting
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		b, err = open.OpenLedger(octx, cfg.BackendURL)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil || attempt == 20 || errors.Is(err, backend.ErrInvalid) || errors.Is(err, backend.ErrNoLedger) {
			log.Error("open backend", "err", err)
			return 2
		}
		time.Sleep(250 * time.Millisecond)
	}
	defer b.Close()
	if cfg.Broken {
		b = newBroken(b)
	}
	b = record(b, h)

	clock := newSkewClock()
	var overrun atomic.Int64 // ns: the next job run works this long, ignoring its context
	var sched *schedule.Scheduler
	schedReady := make(chan struct{})
	go func() {
		for range rates {
			raw, err := os.ReadFile(cfg.RateFile)
			if err != nil {
				continue
			}
			cmd, arg, _ := strings.Cut(strings.TrimSpace(string(raw)), " ")
			switch cmd {
			case "rate":
				if r, err := strconv.ParseFloat(arg, 64); err == nil && r > 0 {
					clock.SetRate(r)
					h.Write(history.Event{Phase: history.Point, Kind: history.Fault, Detail: fmt.Sprintf("clock rate %.2f", r)})
				}
			case "step":
				if d, err := time.ParseDuration(arg); err == nil {
					clock.Step(d)
					h.Write(history.Event{Phase: history.Point, Kind: history.Fault, Detail: "clock step " + d.String()})
				}
			case "overrun":
				if d, err := time.ParseDuration(arg); err == nil {
					overrun.Store(int64(d))
				}
			case "trigger":
				n, err := strconv.Atoi(arg)
				if err != nil {
					continue
				}
				<-schedReady
				go triggerBurst(ctx, sched, n, cfg.Name, h)
			}
		}
	}()

	sink := newSinkClient(cfg.SinkSock)
	effect := func(key string, token uint64, owner string, attempt int) {
		unfenced.Write(history.Event{Phase: history.Point, Kind: history.Effect, Sink: "unfenced", Key: key, Token: token, Owner: owner, Attempt: attempt, Result: history.Accepted})
		wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := sink.write(wctx, SinkWrite{Key: key, Token: token, Writer: owner, Attempt: attempt})
		e := history.Event{Phase: history.Point, Kind: history.Effect, Sink: "fenced", Key: key, Token: token, Owner: owner, Attempt: attempt, HeldToken: r.Highest}
		switch {
		case err != nil:
			e.Result, e.Detail = history.Indeterminate, err.Error()
		case r.Accepted:
			e.Result = history.Accepted
		default:
			e.Result = history.Rejected
		}
		h.Write(e)
	}

	sched, err = schedule.New(b, schedule.WithInstance(cfg.Name), schedule.WithNamespace(cfg.Namespace),
		schedule.WithClock(clock), schedule.WithLogger(log), schedule.WithSweepEvery(100*time.Millisecond),
		schedule.WithClaimTolerance(claimTolerance), schedule.WithVersionSettle(time.Second), schedule.WithGrace(2*time.Second))
	if err != nil {
		log.Error("scheduler", "err", err)
		return 2
	}
	work := func(d time.Duration) {
		if o := overrun.Swap(0); o > 0 {
			d = time.Duration(o) // a job that outlives its timeout
		}
		time.Sleep(d) // the work; a pause here outlives the lease
	}
	// Late is how late the run starts by both the scheduler's clock and
	// the real one: a claim held back as too early after a forward step
	// is late by the first only, a run under a slow clock by the second
	// only — neither is a start past its grace.
	// Op numbers the execution: its Start and End events share it.
	startEvent := func(r schedule.Run, key string) uint64 {
		op := h.NextOp()
		h.Write(history.Event{Phase: history.Point, Kind: history.Start, Op: op, Key: key, Token: uint64(r.Token), Attempt: r.Attempt,
			Late: int64(min(clock.Now().Sub(r.ScheduledAt), time.Since(r.ScheduledAt)))})
		return op
	}
	err = sched.Register(schedule.Job{Name: JobName, Schedule: "@every " + cfg.JobEvery.String(), Crash: schedule.CrashRetry,
		MaxAttempts: 5, LeaseTTL: cfg.JobTTL, MisfireGrace: cfg.JobGrace, Timeout: cfg.JobTimeout,
		Func: func(ctx context.Context, r schedule.Run) error {
			key := OccurrenceKey(r.Job, r.ScheduledAt)
			owner := cfg.Name + "/" + strconv.Itoa(os.Getpid())
			op := startEvent(r, key)
			stop := watchLease(ctx, r, key, op, h)
			work(cfg.JobWork)
			effect(key, uint64(r.Token), owner, r.Attempt)
			stop()
			h.Write(history.Event{Phase: history.Point, Kind: history.End, Op: op, Key: key, Token: uint64(r.Token), Attempt: r.Attempt})
			return nil
		}})
	if err == nil {
		err = sched.Register(schedule.Job{Name: LimitedJob, Schedule: "@every " + LimitedEvery.String(), Crash: schedule.CrashRetry,
			MaxAttempts: 5, LeaseTTL: cfg.JobTTL, MisfireGrace: cfg.JobGrace, Timeout: cfg.JobTimeout, MaxConcurrent: LimitedMax,
			Func: func(ctx context.Context, r schedule.Run) error {
				key := OccurrenceKey(r.Job, r.ScheduledAt)
				op := startEvent(r, key)
				stop := watchLease(ctx, r, key, op, h)
				work(LimitedWork)
				stop()
				h.Write(history.Event{Phase: history.Point, Kind: history.End, Op: op, Key: key, Token: uint64(r.Token), Attempt: r.Attempt})
				return nil
			}})
	}
	if err != nil {
		log.Error("register", "err", err)
		return 2
	}
	close(schedReady)
	if err := sched.Start(ctx); err != nil {
		log.Error("start", "err", err)
		return 2
	}

	var wg sync.WaitGroup
	if len(cfg.LockKeys) > 0 {
		locker, err := leasehold.NewLocker(b, leasehold.WithInstance(cfg.Name), leasehold.WithNamespace(cfg.Namespace),
			leasehold.WithTTL(cfg.LockTTL), leasehold.WithLogger(log))
		if err != nil {
			log.Error("locker", "err", err)
			return 2
		}
		for _, k := range cfg.LockKeys {
			wg.Add(1)
			go func() { defer wg.Done(); lockLoop(ctx, locker, k, cfg, h, effect) }()
		}
	}
	<-ctx.Done()
	wg.Wait()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = sched.Shutdown(sctx)
	return 0
}

// watchLease records, for the execution op of the occurrence key, that
// its lease was lost (Run.LeaseLost closed) as a Lose event whose Result
// says how its context ended then: Lost (cancelled with ErrLeaseLost),
// Cancelled (cancelled earlier, by its timeout: Detail says why) or
// Running (not cancelled a second later: the scheduler broke its
// promise). The jobs here
// ignore their context on purpose — the stale runner fencing must catch —
// so the checker learns from this event that the loss was signalled. stop
// ends the watch once the job's work is done and returns after the event,
// if there is one, was written: a loss signalled before the job's End is
// recorded before it.
func watchLease(ctx context.Context, r schedule.Run, key string, op uint64, h *history.Writer) (stop func()) {
	done, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-done:
			return
		case <-r.LeaseLost():
		}
		e := history.Event{Phase: history.Point, Kind: history.Lose, Op: op, Key: key, Token: uint64(r.Token), Attempt: r.Attempt}
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case <-ctx.Done(): // the scheduler cancels it right after closing LeaseLost
			e.Result, e.Detail = history.Cancelled, context.Cause(ctx).Error()
			if errors.Is(context.Cause(ctx), leasehold.ErrLeaseLost) {
				e.Result = history.Lost
			}
		case <-t.C:
			e.Result, e.Detail = history.Running, "lease lost, context not cancelled a second later"
		}
		h.Write(e)
	}()
	return func() { close(done); <-watched }
}

// triggerBurst triggers LimitedJob n times at once, as an operator's
// retrying script or a dashboard double-click under load would, each with
// its own key, and records how many were accepted.
func triggerBurst(ctx context.Context, sched *schedule.Scheduler, n int, name string, h *history.Writer) {
	var wg sync.WaitGroup
	var ok atomic.Int64
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if sched.Trigger(tctx, LimitedJob, name+"-"+stamp+"-"+strconv.Itoa(i)) == nil {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	h.Write(history.Event{Phase: history.Point, Kind: history.Fault, Key: "trigger", Detail: fmt.Sprintf("%d of %d triggers accepted", ok.Load(), n)})
}

// lockLoop acquires key, writes three effects spaced over cfg.LockHold with
// the lock's token, and releases it; again until ctx ends.
func lockLoop(ctx context.Context, lk *leasehold.Locker, key string, cfg WorkerConfig, h *history.Writer,
	effect func(key string, token uint64, owner string, attempt int)) {
	sinkKey := "lock/" + key
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		l, err := lk.Acquire(actx, key)
		cancel()
		if err != nil {
			continue
		}
		tok := uint64(l.Token())
		h.Write(history.Event{Phase: history.Point, Kind: history.Hold, Key: key, Token: tok})
		context.AfterFunc(l.Context(), func() {
			if errors.Is(context.Cause(l.Context()), leasehold.ErrLeaseLost) {
				h.Write(history.Event{Phase: history.Point, Kind: history.Lose, Key: key, Token: tok, Detail: context.Cause(l.Context()).Error()})
			}
		})
		for range 3 {
			time.Sleep(cfg.LockHold / 3) // work; a pause here outlives the lease
			effect(sinkKey, tok, cfg.Name+"/"+strconv.Itoa(os.Getpid()), 0)
		}
		rctx, cancel := context.WithTimeout(context.Background(), cfg.LockTTL)
		_ = l.Release(rctx)
		cancel()
		time.Sleep(cfg.LockHold / 4) // let others in
	}
}
