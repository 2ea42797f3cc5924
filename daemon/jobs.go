package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/redact"
	"github.com/leasehold/leasehold/internal/supervisor"
	"github.com/leasehold/leasehold/schedule"
)

// scrubErrors masks secrets in fn's errors, which the scheduler records in
// the run history, logs and the API serves.
func scrubErrors(fn schedule.Func, scrub *redact.Scrubber) schedule.Func {
	return func(ctx context.Context, r schedule.Run) error { return redact.Error(fn(ctx, r), scrub) }
}

// InstantFormat is how scheduled instants are passed to jobs: RFC 3339 in
// UTC with milliseconds, the precision of occurrence keys.
const InstantFormat = "2006-01-02T15:04:05.000Z07:00"

// How much of an HTTP job's answer is read, and kept in history; a secret
// the answer echoes is assumed shorter than maxHTTPSecret.
const (
	maxHTTPBody   = 1024
	maxHTTPRead   = 1 << 20
	maxHTTPSecret = 4096
)

// killGrace is how long a command gets between SIGTERM and SIGKILL, at
// most (see killGraceFor).
const killGrace = 5 * time.Second

// killGraceFor is a command job's grace between SIGTERM and SIGKILL:
// killGrace, or a third of the job's lease TTL if that is shorter. While
// the job stops, heartbeats keep its lease — renewed every TTL/3, so some
// two thirds of a TTL are left when the grace starts — and the grace ends
// well before the lease could. If the lease is lost all the same (the
// heartbeats go unanswered), the command is SIGKILLed at once: from then
// on another instance may run the occurrence.
func killGraceFor(j *JobConfig) time.Duration {
	ttl := time.Duration(j.LeaseTTL)
	if ttl <= 0 {
		ttl = 30 * time.Second // schedule's default lease
	}
	return min(killGrace, ttl/3)
}

// outputWait is how long a command's output is still read after its
// supervisor exited (which it does only once the command's tree is gone,
// so only a process out of its reach — see internal/supervisor — may hold
// the pipe open).
const outputWait = 2 * time.Second

// commandStarter starts a command under a supervisor: a
// *supervisor.Pool, or startFresh.
type commandStarter interface {
	Start(supervisor.Spec, supervisor.Options) (*supervisor.Handle, error)
}

// startFresh spawns a supervisor for each command.
type startFresh struct{}

func (startFresh) Start(s supervisor.Spec, o supervisor.Options) (*supervisor.Handle, error) {
	return supervisor.Start(s, o)
}

// commandFunc runs a command job: argv without a shell, under a supervisor
// process (internal/supervisor) that owns the command's whole tree. The
// run's lease deadline is passed to the supervisor on every confirmed
// heartbeat, and the supervisor kills the tree when it passes — even if
// the daemon is paused or dead — or at once when the daemon dies. The tree
// is stopped (SIGTERM, then SIGKILL after killGraceFor) when the run's
// context ends, killed at once when the run's lease is lost, and a
// command that exits leaving processes behind has them killed (and the
// run's output says so): the run ends only when nothing of its tree
// remains. log (nil: none) is told the kill mode in force for each run;
// sup (nil: a supervisor spawned per run) starts the supervisors.
func commandFunc(j *JobConfig, instance string, log *slog.Logger, sup commandStarter) schedule.Func {
	if sup == nil {
		sup = startFresh{}
	}
	c := j.Command
	grace := killGraceFor(j)
	max := c.MaxOutput
	if max == 0 {
		max = 4096
	}
	ttl := time.Duration(j.LeaseTTL)
	return func(ctx context.Context, r schedule.Run) error {
		out := &capped{max: max}
		deadline, moved := r.LeaseDeadline()
		opts := supervisor.Options{Stdout: out, Stderr: out, WaitDelay: outputWait, Deadline: deadline}
		if !deadline.IsZero() && ttl > 0 {
			opts.MaxAhead = ttl
		}
		h, err := sup.Start(supervisor.Spec{Argv: c.Argv, Dir: c.Dir, Env: jobEnv(c, r, instance)}, opts) // a clean environment: never the daemon's tokens
		if err != nil {
			return fmt.Errorf("command %q: %w", c.Argv[0], err)
		}
		if log != nil {
			log.Info("command started", "job", r.Job, "at", r.ScheduledAt, "token", r.Token, "pid", h.Pid(), "kill_mode", h.Mode())
		}
		var (
			lost    = r.LeaseLost()
			ctxDone = ctx.Done()
			stopped error
		)
	wait:
		for {
			select {
			case <-h.Done():
				break wait
			case <-moved:
				deadline, moved = r.LeaseDeadline()
				_ = h.SetDeadline(deadline)
			case <-lost:
				// From now on another instance may run the occurrence.
				lost = nil
				_ = h.Kill()
			case <-ctxDone:
				ctxDone, stopped = nil, context.Cause(ctx)
				if errors.Is(stopped, leasehold.ErrLeaseLost) {
					_ = h.Kill() // the lease is ending: no grace
				} else {
					_ = h.Terminate(grace)
				}
			}
		}
		res := h.Wait()
		if res.Leftovers > 0 {
			_, _ = fmt.Fprintf(out, "\n[leasehold: the command exited leaving %d process(es) running; they were killed before the run ended]", res.Leftovers)
			if log != nil {
				log.Warn("command exited leaving processes running; they were killed", "job", r.Job, "at", r.ScheduledAt, "token", r.Token, "leftovers", res.Leftovers, "kill_mode", h.Mode())
			}
		}
		if res.Killed != "" {
			_, _ = fmt.Fprintf(out, "\n[leasehold: the command was killed: %s]", res.Killed)
		}
		r.Report(out.String())
		err = res.Err
		if stopped != nil {
			err = fmt.Errorf("command %q stopped: %w (%v)", c.Argv[0], stopped, err)
		} else if res.Killed != "" {
			err = fmt.Errorf("command %q killed: %s (%v)", c.Argv[0], res.Killed, err)
		}
		if err != nil {
			return fmt.Errorf("command %q: %w", c.Argv[0], err)
		}
		return nil
	}
}

// capped keeps the first and the last max/2 bytes written — a command's
// last lines usually say why it failed — and counts what lies between.
// Output is arbitrary bytes: String cuts on rune boundaries and makes the
// text valid (backend.ValidText), so the history can store it.
type capped struct {
	mu    sync.Mutex
	max   int
	head  []byte
	tail  []byte // the latest bytes after head filled; trimmed to keep() in bulk
	total int
}

func (c *capped) keep() int { return c.max - c.max/2 }

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	c.total += n
	if room := c.max/2 - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	c.tail = append(c.tail, p...)
	if len(c.tail) > 2*c.keep() {
		c.tail = c.tail[:copy(c.tail, c.tail[len(c.tail)-c.keep():])]
	}
	return n, nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	tail := c.tail
	if len(tail) > c.keep() {
		tail = tail[len(tail)-c.keep():]
	}
	cut := c.total - len(c.head) - len(tail)
	if cut == 0 {
		return backend.ValidText(string(c.head) + string(tail))
	}
	head := c.head
	// Never split a rune at the cut: drop a partial one at the end of the
	// head and continuation bytes at the start of the tail.
	for k := 1; k <= utf8.UTFMax-1 && k <= len(head); k++ {
		if utf8.RuneStart(head[len(head)-k]) {
			if !utf8.FullRune(head[len(head)-k:]) {
				head = head[:len(head)-k]
			}
			break
		}
	}
	for k := 0; k < utf8.UTFMax-1 && len(tail) > 0 && !utf8.RuneStart(tail[0]); k++ {
		tail = tail[1:]
	}
	cut = c.total - len(head) - len(tail)
	return backend.ValidText(string(head)) + backend.CutMarker(cut) + backend.ValidText(string(tail))
}

// httpFunc calls an HTTP endpoint. The request carries the occurrence's
// identity so the endpoint can fence or de-duplicate its effects:
// Idempotency-Key (job@instant), Leasehold-Token, Leasehold-Scheduled-At,
// Leasehold-Attempt.
//
// A request unanswered after bound (httpTimeout) is abandoned and the run
// fails with an error wrapping schedule.ErrTimeout.
func httpFunc(j *JobConfig, client *http.Client, scrub *redact.Scrubber, bound time.Duration) schedule.Func {
	h := j.HTTP
	if h != nil && client != nil {
		client = redirectClient(client, h)
	}
	return func(ctx context.Context, r schedule.Run) error {
		ctx, cancel := context.WithTimeoutCause(ctx, bound, fmt.Errorf("%w after %v", schedule.ErrJobTimeout, bound))
		defer cancel()
		// noAnswer names the bound when it is what stopped the request.
		noAnswer := func(err error) error {
			cause := context.Cause(ctx)
			switch {
			case ctx.Err() == nil || !errors.Is(cause, schedule.ErrJobTimeout):
				return err
			case errors.Is(err, schedule.ErrJobTimeout):
				return fmt.Errorf("no answer: %w", err)
			}
			return fmt.Errorf("no answer: %w: %w", cause, err)
		}
		var body io.Reader
		if h.Body != "" {
			body = strings.NewReader(h.Body)
		}
		req, err := http.NewRequestWithContext(ctx, h.Method, h.URL, body)
		if err != nil {
			return fmt.Errorf("http job %q: %w", j.Name, err)
		}
		for k, v := range h.Headers {
			req.Header.Set(k, v)
		}
		at := r.ScheduledAt.UTC().Format(InstantFormat)
		req.Header.Set("Idempotency-Key", r.Job+"@"+at)
		req.Header.Set("Leasehold-Token", r.Token.String())
		req.Header.Set("Leasehold-Scheduled-At", at)
		req.Header.Set("Leasehold-Attempt", strconv.Itoa(r.Attempt))
		resp, err := client.Do(req)
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = redactURL(ue.URL) // it repeats the URL, query included
		}
		if err != nil {
			return fmt.Errorf("http job %q: %s %s: %w", j.Name, h.Method, redactURL(h.URL), noAnswer(err))
		}
		defer resp.Body.Close()
		// The body's head and tail (of at most its first MiB), as text. An
		// endpoint may echo its URL: secrets are scrubbed before the cut,
		// which could otherwise leave a secret's first bytes in the head.
		answer, rerr := io.ReadAll(io.LimitReader(resp.Body, maxHTTPRead))
		if len(answer) == maxHTTPRead {
			answer = answer[:maxHTTPRead-maxHTTPSecret] // a secret may straddle the read limit
		}
		text := scrub.Text(backend.ValidText(resp.Status + "\n" + string(answer)))
		r.Report(backend.CleanText(text, maxHTTPBody))
		ok := resp.StatusCode/100 == 2
		if h.Expect != 0 {
			ok = resp.StatusCode == h.Expect
		}
		if !ok {
			return fmt.Errorf("http job %q: %s %s answered %s", j.Name, h.Method, redactURL(h.URL), resp.Status)
		}
		if rerr != nil && ctx.Err() != nil {
			// The status came, the body stalled until the bound.
			return fmt.Errorf("http job %q: %s %s answered %s, then its body stalled: %w", j.Name, h.Method, redactURL(h.URL), resp.Status, noAnswer(rerr))
		}
		if rerr != nil {
			// The answer was cut off (connection dropped mid-body): the
			// endpoint may not have done what its status says.
			return fmt.Errorf("http job %q: %s %s answered %s, then its body was cut off: %w", j.Name, h.Method, redactURL(h.URL), resp.Status, rerr)
		}
		return nil
	}
}

// DefaultHTTPTimeout bounds an HTTP job that has no timeout: an endpoint
// that never answers would otherwise keep the run open, holding its lease
// and, under max_concurrent, the slots of later occurrences.
const DefaultHTTPTimeout = 5 * time.Minute

// httpTimeout is how long an HTTP job's request may take: the job's
// timeout, else DefaultHTTPTimeout.
func httpTimeout(j *JobConfig) time.Duration {
	if j.Timeout > 0 {
		return time.Duration(j.Timeout)
	}
	return DefaultHTTPTimeout
}
