package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/supervisor"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/schedule"
)

// hookRunner calls the on_failure hooks of the daemon's jobs, each on a
// goroutine of its own; stop waits for those in flight.
type hookRunner struct {
	ledger    backend.Ledger // the namespace's: where a failure is confirmed
	namespace string
	instance  string
	client    *http.Client // follows no redirect
	sup       commandStarter
	log       *slog.Logger

	ctx    context.Context // ended by stop, past the grace
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	stopped bool                   // by stop: no hook starts
	byJob   map[string]*HookConfig // each job's hook, for occurrences abandoned here (use)
}

func newHookRunner(cfg *Config, l backend.Ledger, sup commandStarter, log *slog.Logger) *hookRunner {
	ctx, cancel := context.WithCancel(context.Background())
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &hookRunner{ledger: schedule.NamespaceLedger(l, cfg.Namespace), namespace: cfg.Namespace, instance: cfg.Instance,
		client: client, sup: sup, log: log, ctx: ctx, cancel: cancel}
}

// use sets the jobs' hooks that abandoned occurrences call (the config
// in force: set at start and by each reload that succeeds).
func (h *hookRunner) use(cfg *Config) {
	m := map[string]*HookConfig{}
	for i := range cfg.Jobs {
		if hook := cfg.hookFor(&cfg.Jobs[i]); hook != nil && cfg.Jobs[i].Mode != string(schedule.EveryInstance) {
			m[cfg.Jobs[i].Name] = hook
		}
	}
	h.mu.Lock()
	h.byJob = m
	h.mu.Unlock()
}

// abandoned calls the hook of ev's job, if it has one, for the occurrence
// this daemon just marked abandoned (its runner died under crash: skip, or
// its attempts ran out): such an occurrence failed for good too. The
// ledger's Abandon succeeds once per occurrence, so one daemon calls it.
// It does not block: the observer calls it on the scheduler's goroutine.
func (h *hookRunner) abandoned(ev schedule.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hook := h.byJob[ev.Job]
	if hook == nil {
		return
	}
	if h.stopped {
		h.log.Warn("on_failure hook not called for an abandoned occurrence: the daemon has stopped", "job", ev.Job, "at", ev.ScheduledAt)
		return
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
		rec, err := h.ledger.GetRun(ctx, ev.Job, ev.ScheduledAt)
		cancel()
		if err != nil || rec.State != backend.Abandoned {
			h.log.Warn("on_failure hook not called for an abandoned occurrence: its record could not be read as abandoned", "job", ev.Job, "at", ev.ScheduledAt, "state", rec.State, "err", err)
			return
		}
		r := schedule.Run{Job: ev.Job, ScheduledAt: ev.ScheduledAt, Attempt: rec.Attempt, Token: leasehold.Token(rec.Token)}
		h.call(hook, r, fmt.Sprintf("abandoned: its runner %s died (attempt %d) and no attempt follows (crash: skip, or its attempts ran out)", rec.Owner.Instance, rec.Attempt))
	}()
}

// stop waits for the hooks in flight, at most grace; then it stops them
// (a command is killed) and waits for them to return.
func (h *hookRunner) stop(grace time.Duration) {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		h.cancel()
		<-done
	}
	h.cancel()
}

// confirmWait bounds how long after a failed run returned its failure is
// looked for in the ledger: the scheduler records it within the run's
// lease (finishRun), TTL at most.
func confirmWait(j *JobConfig) time.Duration {
	ttl := time.Duration(j.LeaseTTL)
	if ttl <= 0 {
		ttl = 30 * time.Second // schedule's default lease
	}
	return ttl + 5*time.Second
}

// wrap returns fn calling j's hook (nil: fn itself) when a run fails for
// good: no retry follows under j's retry policy and — for a job with
// claims — the ledger records the occurrence failed with this run's
// token. So an occurrence fires its hook once, on the daemon that ran its
// last attempt; an attempt whose lease was lost (another daemon may run
// the occurrence again) fires none.
func (h *hookRunner) wrap(j *JobConfig, hook *HookConfig, fn schedule.Func) schedule.Func {
	if h == nil || hook == nil {
		return fn
	}
	local := j.Mode == string(schedule.EveryInstance)
	wait := confirmWait(j)
	return func(ctx context.Context, r schedule.Run) error {
		err := fn(ctx, r)
		if err == nil || (!local && r.Attempt < 1+j.Retry.Max) {
			return err
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.stopped { // a run that outlived the shutdown
			h.log.Warn("on_failure hook not called: the daemon has stopped", "job", r.Job, "at", r.ScheduledAt, "token", r.Token)
			return err
		}
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			text := backend.CleanText(err.Error(), backend.MaxErrorLen) // as the ledger stores it
			if !local {
				var ok bool
				if text, ok = h.recordedFailed(r, wait); !ok {
					return
				}
			}
			h.call(hook, r, text)
		}()
		return err
	}
}

// recordedFailed waits (at most wait) until the ledger records r's
// occurrence finished, and reports whether it did so as failed by r's
// attempt, with the error recorded.
func (h *hookRunner) recordedFailed(r schedule.Run, wait time.Duration) (string, bool) {
	ctx, cancel := context.WithTimeout(h.ctx, wait)
	defer cancel()
	backoff := 10 * time.Millisecond
	for {
		rec, err := h.ledger.GetRun(ctx, r.Job, r.ScheduledAt)
		if err == nil && (rec.Token != uint64(r.Token) || rec.State != backend.Running) {
			if rec.Token == uint64(r.Token) && rec.State == backend.Failed {
				return rec.Error, true
			}
			h.log.Warn("on_failure hook not called: another attempt took the occurrence over, or its outcome is not this run's failure",
				"job", r.Job, "at", r.ScheduledAt, "token", r.Token, "recorded_token", rec.Token, "recorded_state", rec.State)
			return "", false
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			h.log.Warn("on_failure hook not called: the run's failure was not seen recorded in time", "job", r.Job, "at", r.ScheduledAt, "token", r.Token, "err", err)
			return "", false
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// call runs hook for r's failure (errText: as recorded) and logs how it
// went; it never logs the hook's URL unmasked nor its headers.
func (h *hookRunner) call(hook *HookConfig, r schedule.Run, errText string) {
	body := HookBody{Namespace: h.namespace, Job: r.Job, ScheduledAt: r.ScheduledAt.UTC().Format(InstantFormat),
		Attempt: r.Attempt, Token: r.Token.String(), Instance: h.instance, Error: errText}
	timeout := time.Duration(hook.Timeout)
	if timeout <= 0 {
		timeout = DefaultHookTimeout
	}
	ctx, cancel := context.WithTimeout(h.ctx, timeout)
	defer cancel()
	start := time.Now()
	h.log.Debug("on_failure hook calling", "job", r.Job, "at", r.ScheduledAt, "token", r.Token)
	var err error
	kind := "command"
	if hook.HTTP != nil {
		kind = "http"
		err = h.post(ctx, hook.HTTP, body)
	} else {
		err = h.command(ctx, hook.Command, r, body)
	}
	log := h.log.With("job", r.Job, "at", r.ScheduledAt, "token", r.Token, "attempt", r.Attempt, "hook", kind, "took", time.Since(start))
	if err != nil {
		log.Error("on_failure hook failed", "err", err)
		return
	}
	log.Info("on_failure hook called")
}

// post sends body to hh.URL.
func (h *hookRunner) post(ctx context.Context, hh *HookHTTP, body HookBody) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hh.URL, bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("POST %s: the request cannot be made (%T)", redactURL(hh.URL), err) // its text may repeat the URL
	}
	for k, v := range hh.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = redactURL(ue.URL) // it repeats the URL, query included
	}
	if err != nil {
		return fmt.Errorf("POST %s: %w", redactURL(hh.URL), err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxHTTPRead))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s answered %s", redactURL(hh.URL), resp.Status)
	}
	return nil
}

// command runs c under a supervisor until it exits or ctx ends (then it
// is stopped: SIGTERM, SIGKILL after killGrace).
func (h *hookRunner) command(ctx context.Context, c *HookCommand, r schedule.Run, body HookBody) error {
	out := &capped{max: 1024}
	deadline, _ := ctx.Deadline()
	env := append(jobEnv(&CommandJob{Env: c.Env, EnvPassthrough: c.EnvPassthrough}, r, h.instance),
		"LEASEHOLD_NAMESPACE="+h.namespace, "LEASEHOLD_ERROR="+body.Error)
	// The supervisor kills the tree at the deadline (plus the grace) even
	// if the daemon is paused or dead.
	hd, err := h.sup.Start(supervisor.Spec{Argv: c.Argv, Dir: c.Dir, Env: env},
		supervisor.Options{Stdout: out, Stderr: out, WaitDelay: outputWait, Deadline: deadline.Add(killGrace)})
	if err != nil {
		return fmt.Errorf("command %q: %w", c.Argv[0], err)
	}
	select {
	case <-hd.Done():
	case <-ctx.Done():
		_ = hd.Terminate(killGrace)
	}
	res := hd.Wait()
	why := res.Err
	if ctx.Err() != nil {
		why = fmt.Errorf("stopped: %w (%v)", context.Cause(ctx), res.Err)
	}
	if why != nil {
		return fmt.Errorf("command %q: %w; output: %s", c.Argv[0], why, strconv.Quote(out.String()))
	}
	return nil
}

// scheduleObserver is the scheduler's observer: the metrics (as a
// leasehold.Observer too, for the leader election), and the hooks of
// occurrences this daemon abandons.
type scheduleObserver struct {
	*metrics.Metrics
	hooks *hookRunner
}

// ObserveSchedule implements schedule.Observer.
func (o scheduleObserver) ObserveSchedule(ev schedule.Event) {
	o.Metrics.ObserveSchedule(ev)
	if ev.Kind == schedule.EventAbandon {
		o.hooks.abandoned(ev)
	}
}
