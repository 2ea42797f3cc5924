// Package harness is leasehold's Jepsen-style fault harness. It starts N
// worker processes running the real scheduler and Locker code against one
// backend, applies a fault schedule drawn from a seed — kill -9 a worker,
// SIGSTOP one past its lease TTL and SIGCONT it, partition one from the
// backend through its own TCP proxy (black hole, or replies delayed past the
// TTL), restart the backend server, run one worker's scheduler clock fast or
// slow — and collects what every process did in a history timestamped on
// the host's CLOCK_MONOTONIC. Side effects go to a fenced sink (which
// rejects a token lower than one it has seen for the key) and to an
// unfenced log. Package checker judges the result.
//
// A worker is the same program as the harness, started again with
// EnvWorker set: tests call WorkerFromEnv in TestMain, the lab command
// (cmd/leasehold-lab) has a hidden "chaos worker" subcommand.
package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/chaos/history"
	"github.com/leasehold/leasehold/internal/childproc"
	"github.com/leasehold/leasehold/internal/open"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// jobGrace is both jobs' misfire grace: an occurrence that would start
// later than this after its instant is skipped (policy skip).
const jobGrace = 500 * time.Millisecond

// claimTolerance is the workers' schedule.WithClaimTolerance: how early a
// claim may be by the ledger's clock, and how much later than the misfire
// grace the ledger still accepts an on-time claim (its MaxLate).
const claimTolerance = 100 * time.Millisecond

// Fault names.
const (
	FaultKill           = "kill"
	FaultPause          = "pause"
	FaultPartition      = "partition"
	FaultRestartBackend = "restart-backend"
	FaultClockSkew      = "clock-skew"
	FaultPauseAll       = "pause-all"
	FaultClockStep      = "clock-step"
	FaultOverrun        = "overrun"
	FaultTrigger        = "trigger"
)

// AllFaults lists every fault, in the order of the flag's help.
func AllFaults() []string {
	return []string{FaultKill, FaultPause, FaultPartition, FaultRestartBackend, FaultClockSkew,
		FaultPauseAll, FaultClockStep, FaultOverrun, FaultTrigger}
}

// Files a run writes in its output directory.
const (
	HistoryFile  = "history.jsonl"  // every worker's operations and events, and the harness's faults
	SinkFile     = "fenced.jsonl"   // every write the fenced sink saw, accepted or rejected
	UnfencedFile = "unfenced.jsonl" // every effect the workers wrote without fencing
	RunFile      = "run.json"       // the run's parameters and capabilities (Run)
)

// Config describes a run. Backend and WorkerCommand are required.
type Config struct {
	// Backend is a kind (Kinds: the harness starts a private server, or a
	// SQLite file) or the URL of a running backend (restart-backend then
	// cannot apply).
	Backend string
	// Broken wraps the backend in the negative control (owner checks off,
	// token counter reset on release): the checker must flag the run.
	Broken bool
	// Instances is the number of worker processes (default 5).
	Instances int
	// Duration of the fault phase (default 30 s); a calm second before and
	// after it are added.
	Duration time.Duration
	// Faults to draw from (default all). Faults that cannot apply to the
	// backend (restart-backend without a server of ours, partition for
	// SQLite) are dropped and named in the run's Notes.
	Faults []string
	// Seed of the fault schedule: which fault, which worker, how long.
	Seed uint64
	// Out is the directory for the run's files (created).
	Out string
	// WorkerCommand returns the command that runs one worker: it must call
	// WorkerFromEnv (the harness adds EnvWorker to env).
	WorkerCommand func(env []string) *exec.Cmd
	// TB is used to start servers (internal/testkit/testserver); nil outside tests.
	TB testserver.TB
	// Log receives progress lines (default: discard).
	Log io.Writer

	JobEvery time.Duration // default 100 ms
	JobWork  time.Duration // default 300 ms
	TTL      time.Duration // lease TTL of jobs and locks (default max(1 s, backend minimum))
	LockKeys int           // keys of the lock workload (default 2)
}

// Run is what run.json holds.
type Run struct {
	Backend      string               `json:"backend"` // kind or redacted URL
	Capabilities backend.Capabilities `json:"capabilities"`
	Broken       bool                 `json:"broken"`
	Instances    int                  `json:"instances"`
	Duration     time.Duration        `json:"duration"`
	Faults       []string             `json:"faults"`
	Seed         uint64               `json:"seed"`
	JobEvery     time.Duration        `json:"job_every"`
	JobWork      time.Duration        `json:"job_work"`
	JobGrace     time.Duration        `json:"job_grace"`   // misfire grace (policy skip) of both jobs
	JobTimeout   time.Duration        `json:"job_timeout"` // timeout of both jobs
	// ClaimTolerance is the workers' claim tolerance: an on-time claim
	// under policy skip is refused by the ledger when it arrives later
	// than JobGrace + ClaimTolerance after its instant.
	ClaimTolerance time.Duration `json:"claim_tolerance"`
	// Limits is each job's MaxConcurrent (0: none).
	Limits map[string]int `json:"limits"`
	TTL    time.Duration  `json:"ttl"`
	// Window is the workload window on CLOCK_MONOTONIC (ns) and on the wall
	// clock (Unix ms): occurrences inside it are expected to run.
	WindowMono [2]int64 `json:"window_mono"`
	WindowWall [2]int64 `json:"window_wall_ms"`
	Applied    []Fault  `json:"applied"`
	Notes      []string `json:"notes,omitempty"`
}

// Fault is one applied fault.
type Fault struct {
	Kind   string `json:"kind"`
	Target string `json:"target"` // worker name, or "backend"
	Detail string `json:"detail,omitempty"`
	From   int64  `json:"from"` // CLOCK_MONOTONIC ns
	To     int64  `json:"to"`
	// Step is clock-step's step (at From; the step back, by -Step, is at
	// StepBack).
	Step     time.Duration `json:"step,omitempty"`
	StepBack int64         `json:"step_back,omitempty"`
}

type worker struct {
	name string
	cfg  WorkerConfig
	env  []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Execute runs the harness as cfg says and returns what run.json holds.
// The history is in cfg.Out; package checker reads it.
func Execute(ctx context.Context, cfg Config) (*Run, error) {
	if !childproc.CanPause {
		return nil, fmt.Errorf("harness: the fault harness pauses workers with SIGSTOP and steers them with SIGUSR1: %w", childproc.ErrUnsupported)
	}
	if cfg.WorkerCommand == nil {
		return nil, fmt.Errorf("%w: harness: WorkerCommand is nil", backend.ErrInvalid)
	}
	if cfg.Instances == 0 {
		cfg.Instances = 5
	}
	if cfg.Instances < 2 || cfg.Instances > 64 {
		return nil, fmt.Errorf("%w: instances %d is not within 2..64", backend.ErrInvalid, cfg.Instances)
	}
	if cfg.Duration == 0 {
		cfg.Duration = 30 * time.Second
	}
	if cfg.Duration < 0 {
		return nil, fmt.Errorf("%w: duration %v is negative", backend.ErrInvalid, cfg.Duration)
	}
	if cfg.Faults == nil {
		cfg.Faults = AllFaults()
	}
	for _, f := range cfg.Faults {
		if !slices.Contains(AllFaults(), f) {
			return nil, fmt.Errorf("%w: fault %q is unknown (known: %s)", backend.ErrInvalid, f, strings.Join(AllFaults(), ", "))
		}
	}
	if cfg.JobEvery == 0 {
		cfg.JobEvery = 100 * time.Millisecond
	}
	if cfg.JobWork == 0 {
		cfg.JobWork = 300 * time.Millisecond
	}
	if cfg.LockKeys == 0 {
		cfg.LockKeys = 2
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.Out == "" {
		return nil, fmt.Errorf("%w: harness: output directory is empty", backend.ErrInvalid)
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	tb := cfg.TB
	if tb == nil {
		rt := newRunTB(filepath.Join(cfg.Out, "servers"))
		defer rt.cleanup()
		tb = rt
	}
	var run *Run
	err := guard(func() error {
		var err error
		run, err = execute(ctx, cfg, tb)
		return err
	})
	return run, err
}

func execute(ctx context.Context, cfg Config, tb testserver.TB) (*Run, error) {
	logf := func(f string, a ...any) { fmt.Fprintf(cfg.Log, "chaos: "+f+"\n", a...) }
	for _, f := range []string{HistoryFile, SinkFile, UnfencedFile} {
		_ = os.Remove(filepath.Join(cfg.Out, f))
	}
	srv, err := startBackend(tb, cfg.Backend, cfg.Out)
	if err != nil {
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	b, err := open.Open(octx, srv.url)
	cancel()
	if err != nil {
		return nil, err
	}
	caps := b.Capabilities()
	b.Close()
	if !caps.MultiProcess {
		return nil, fmt.Errorf("%w: backend %s serves one process only", backend.ErrInvalid, caps.Name)
	}
	ttl := cfg.TTL
	if ttl == 0 {
		ttl = max(time.Second, caps.MinTTL)
	}
	run := &Run{Backend: redact(cfg.Backend), Capabilities: caps, Broken: cfg.Broken, Instances: cfg.Instances,
		Duration: cfg.Duration, Seed: cfg.Seed, JobEvery: cfg.JobEvery, JobWork: cfg.JobWork, TTL: ttl,
		JobGrace: jobGrace, JobTimeout: 3 * cfg.JobWork, ClaimTolerance: claimTolerance, Limits: map[string]int{JobName: 0, LimitedJob: LimitedMax}}
	for _, f := range cfg.Faults {
		switch {
		case f == FaultRestartBackend && srv.server == nil:
			run.Notes = append(run.Notes, "restart-backend dropped: the harness did not start this backend's server")
		case f == FaultPartition && srv.addr == "":
			run.Notes = append(run.Notes, "partition dropped: SQLite has no network to cut")
		default:
			run.Faults = append(run.Faults, f)
		}
	}

	hist, err := history.Create(filepath.Join(cfg.Out, HistoryFile), "harness")
	if err != nil {
		return nil, err
	}
	defer hist.Close()
	sink, err := StartSink(filepath.Join(cfg.Out, "sink.sock"), filepath.Join(cfg.Out, SinkFile))
	if err != nil {
		return nil, err
	}
	defer sink.Close()

	var lockKeys []string
	for i := range cfg.LockKeys {
		lockKeys = append(lockKeys, fmt.Sprintf("k%d", i))
	}
	ns := fmt.Sprintf("chaos%d", time.Now().UnixNano()%1e9)
	proxies := make([]*chaos.Proxy, cfg.Instances)
	workers := make([]*worker, cfg.Instances)
	for i := range cfg.Instances {
		name := fmt.Sprintf("w%d", i)
		url := srv.url
		if srv.addr != "" {
			p, err := chaos.New(srv.addr)
			if err != nil {
				return nil, err
			}
			defer p.Close()
			proxies[i] = p
			if url, err = viaProxy(srv.url, p.Addr()); err != nil {
				return nil, err
			}
		}
		wc := WorkerConfig{Name: name, BackendURL: url, Broken: cfg.Broken, Namespace: ns,
			History: filepath.Join(cfg.Out, HistoryFile), Unfenced: filepath.Join(cfg.Out, UnfencedFile),
			SinkSock: filepath.Join(cfg.Out, "sink.sock"), RateFile: filepath.Join(cfg.Out, name+".rate"),
			JobEvery: cfg.JobEvery, JobWork: cfg.JobWork, JobTTL: ttl, JobGrace: run.JobGrace, JobTimeout: run.JobTimeout,
			LockKeys: lockKeys, LockTTL: ttl, LockHold: ttl / 2}
		raw, _ := json.Marshal(wc)
		workers[i] = &worker{name: name, cfg: wc, env: []string{EnvWorker + "=" + string(raw)}}
	}
	for _, w := range workers {
		if err := w.start(cfg, filepath.Join(cfg.Out, w.name+".log")); err != nil {
			return nil, err
		}
	}
	defer func() {
		for _, w := range workers {
			w.stop()
		}
	}()
	logf("%d workers on %s (ttl %v), faults %v, seed %d", cfg.Instances, caps.Name, ttl, run.Faults, cfg.Seed)

	// Calm start: every worker connected and the job's version recorded.
	if !sleepCtx(ctx, 2*time.Second) {
		return nil, ctx.Err()
	}
	run.WindowMono[0], run.WindowWall[0] = history.Mono(), time.Now().UnixMilli()
	hist.Write(history.Event{Phase: history.Call, Kind: history.Boundary, Detail: strconv.FormatInt(run.WindowWall[0], 10)})

	busy := trackBusy(ctx, filepath.Join(cfg.Out, HistoryFile))
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	end := time.Now().Add(cfg.Duration)
	// Every enabled fault once, in a seeded order, then at random.
	first := slices.Clone(run.Faults)
	rng.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	for n := 0; len(run.Faults) > 0 && (time.Until(end) > 0 || n < len(first)) && ctx.Err() == nil; n++ {
		kind := run.Faults[rng.IntN(len(run.Faults))]
		if n < len(first) {
			kind = first[n]
		}
		i := rng.IntN(cfg.Instances)
		f := Fault{Kind: kind, Target: workers[i].name, From: history.Mono()}
		hist.Write(history.Event{Phase: history.Call, Kind: history.Fault, Key: kind, Owner: f.Target})
		var ferr error
		switch kind {
		case FaultKill:
			busy.forget(workers[i].name)
			down := time.Duration(200+rng.IntN(800)) * time.Millisecond
			f.Detail = "SIGKILL, started again after " + down.String()
			ferr = workers[i].kill(cfg, filepath.Join(cfg.Out, workers[i].name+".log"), down)
		case FaultPause:
			// Past the TTL, and past a 2 s ZooKeeper session, with time
			// for another worker to take over and write.
			d := max(3*ttl, 3*time.Second) + time.Duration(rng.IntN(1000))*time.Millisecond
			f.Detail = "SIGSTOP for " + d.String()
			if busy.waitBusy(ctx, workers[i].name, 3*time.Second) {
				f.Detail += ", mid-run"
			}
			f.From = history.Mono()
			workers[i].signal(childproc.SigStop)
			sleepCtx(ctx, d)
			workers[i].signal(childproc.SigCont)
		case FaultPartition:
			d := 2*ttl + time.Duration(rng.IntN(1000))*time.Millisecond
			if rng.IntN(2) == 0 {
				f.Detail = "black hole for " + d.String()
				proxies[i].SetDrop(true)
				sleepCtx(ctx, d)
				proxies[i].SetDrop(false)
			} else {
				f.Detail = fmt.Sprintf("replies delayed by %v for %v", ttl, d)
				proxies[i].SetDelay(ttl)
				sleepCtx(ctx, d)
				proxies[i].SetDelay(0)
			}
			proxies[i].CloseConns() // a stream that lost bytes is out of step
		case FaultRestartBackend:
			// A crash: SIGKILL (a graceful stop can wait on clients: a
			// PostgreSQL smart shutdown), then start on the same data.
			f.Target, f.Detail = "backend", "SIGKILL and start"
			ferr = guard(func() error { srv.server.Kill(); srv.server.Start(); return nil })
		case FaultPauseAll:
			// Every worker at once, past the TTL: every lease expires with
			// nobody awake to take over, and every worker wakes late.
			d := max(3*ttl, 3*time.Second) + time.Duration(rng.IntN(1000))*time.Millisecond
			f.Target, f.Detail = "all", "SIGSTOP every worker for "+d.String()
			for _, w := range workers {
				w.signal(childproc.SigStop)
			}
			sleepCtx(ctx, d)
			for _, w := range workers {
				w.signal(childproc.SigCont)
			}
		case FaultClockStep:
			// The host's wall clock steps, as an NTP step or an operator's
			// date command moves it: every worker's scheduler clock at once
			// (the backend's clock stays).
			step := time.Duration(1000+rng.IntN(2000)) * time.Millisecond * time.Duration(1-2*rng.IntN(2))
			d := time.Duration(2000+rng.IntN(2000)) * time.Millisecond
			f.Target, f.Step = "all", step
			f.Detail = fmt.Sprintf("every worker's wall clock stepped %v for %v, then back", step, d)
			f.From = history.Mono()
			for _, w := range workers {
				w.control(fmt.Sprintf("step %v", step))
			}
			sleepCtx(ctx, d)
			f.StepBack = history.Mono()
			for _, w := range workers {
				w.control(fmt.Sprintf("step %v", -step))
			}
		case FaultOverrun:
			// The next run on the worker ignores its context and works
			// past its timeout and past its lease's TTL.
			d := 3 * max(ttl, run.JobTimeout)
			f.Detail = fmt.Sprintf("next run works %v, ignoring its %v timeout", d, run.JobTimeout)
			workers[i].control(fmt.Sprintf("overrun %v", d))
			busy.waitBusy(ctx, workers[i].name, 3*time.Second)
			sleepCtx(ctx, d)
		case FaultTrigger:
			n := 10 + rng.IntN(21)
			f.Detail = fmt.Sprintf("%d triggers of %s at once (max_concurrent %d)", n, LimitedJob, LimitedMax)
			workers[i].control(fmt.Sprintf("trigger %d", n))
			sleepCtx(ctx, 2*LimitedWork)
		case FaultClockSkew:
			rate := 1 + (0.1+0.4*rng.Float64())*float64(1-2*rng.IntN(2))
			d := time.Duration(2000+rng.IntN(2000)) * time.Millisecond
			f.Detail = fmt.Sprintf("clock rate %.2f for %v", rate, d)
			workers[i].setRate(rate)
			sleepCtx(ctx, d)
			workers[i].setRate(1)
		}
		f.To = history.Mono()
		hist.Write(history.Event{Phase: history.Return, Kind: history.Fault, Key: kind, Owner: f.Target, Detail: f.Detail})
		run.Applied = append(run.Applied, f)
		logf("fault %s on %s: %s", kind, f.Target, f.Detail)
		if ferr != nil {
			return nil, fmt.Errorf("fault %s: %w", kind, ferr)
		}
		sleepCtx(ctx, time.Duration(300+rng.IntN(1200))*time.Millisecond)
	}
	if len(run.Faults) == 0 {
		sleepCtx(ctx, time.Until(end))
	}
	// Calm end: reclaims of the last faults' victims complete.
	sleepCtx(ctx, 2*ttl+time.Second)
	run.WindowMono[1], run.WindowWall[1] = history.Mono(), time.Now().UnixMilli()
	hist.Write(history.Event{Phase: history.Return, Kind: history.Boundary, Detail: strconv.FormatInt(run.WindowWall[1], 10)})
	for _, w := range workers {
		w.stop()
	}
	raw, _ := json.MarshalIndent(run, "", "  ")
	if err := os.WriteFile(filepath.Join(cfg.Out, RunFile), raw, 0o644); err != nil {
		return nil, err
	}
	return run, ctx.Err()
}

func redact(spec string) string {
	if !strings.Contains(spec, "://") {
		return spec
	}
	if i := strings.Index(spec, "@"); i >= 0 {
		if j := strings.Index(spec, "://"); j >= 0 && j < i {
			return spec[:j+3] + "xxxxx" + spec[i:]
		}
	}
	return spec
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (w *worker) start(cfg Config, logPath string) error {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := cfg.WorkerCommand(append(os.Environ(), w.env...))
	cmd.Stdout, cmd.Stderr = lf, lf
	childproc.Prepare(cmd, childproc.Options{Group: true})
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("start worker %s: %w", w.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); lf.Close(); close(done) }()
	w.mu.Lock()
	w.cmd, w.done = cmd, done
	w.mu.Unlock()
	return nil
}

func (w *worker) signal(sig os.Signal) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd != nil {
		_ = childproc.Signal(w.cmd.Process, sig)
	}
}

// kill kills the worker with SIGKILL and starts it again after down.
func (w *worker) kill(cfg Config, logPath string, down time.Duration) error {
	w.signal(os.Kill)
	w.mu.Lock()
	done := w.done
	w.mu.Unlock()
	if done != nil {
		<-done
	}
	time.Sleep(down)
	return w.start(cfg, logPath)
}

func (w *worker) setRate(rate float64) { w.control("rate " + strconv.FormatFloat(rate, 'f', 3, 64)) }

// control hands the worker a command through its control file and
// SIGUSR1: "rate R", "step D", "overrun D", "trigger N".
func (w *worker) control(cmd string) {
	if err := os.WriteFile(w.cfg.RateFile, []byte(cmd), 0o644); err == nil {
		w.signal(childproc.SigUsr1)
	}
}

// stop asks the worker to shut down (SIGCONT, SIGTERM) and kills it after
// 10 s. Idempotent.
func (w *worker) stop() {
	w.mu.Lock()
	cmd, done := w.cmd, w.done
	w.cmd = nil
	w.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = childproc.Signal(cmd.Process, childproc.SigCont)
	_ = childproc.Signal(cmd.Process, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}
