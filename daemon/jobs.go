package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/childproc"
	"github.com/leasehold/leasehold/internal/redact"
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

// outputWait is how long a command's output is still read after it
// exited: a process it left running in a session of its own (out of reach
// of the group kill) may hold the pipe open for as long as it lives.
const outputWait = 2 * time.Second

// commandFunc runs a command job: argv without a shell, in its own process
// group, killed (SIGTERM, then SIGKILL after killGraceFor) when the run's
// context ends — SIGKILL at once when the run's lease is lost — and, on
// Linux, killed by the kernel if the daemon dies (see internal/childproc
// for what other systems do).
func commandFunc(j *JobConfig, instance string) schedule.Func {
	c := j.Command
	grace := killGraceFor(j)
	max := c.MaxOutput
	if max == 0 {
		max = 4096
	}
	return func(ctx context.Context, r schedule.Run) error {
		cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
		cmd.Dir = c.Dir
		cmd.Env = jobEnv(c, r, instance) // a clean environment: never the daemon's tokens
		out := &capped{max: max}
		cmd.Stdout, cmd.Stderr = out, out
		cmd.WaitDelay = outputWait

		child, err := childproc.Start(cmd, childproc.Options{Group: true, DieWithParent: true})
		if err != nil {
			return fmt.Errorf("command %q: %w", c.Argv[0], err)
		}
		select {
		case <-child.Done():
			err = child.Wait()
		case <-ctx.Done():
			g := grace
			if errors.Is(context.Cause(ctx), leasehold.ErrLeaseLost) {
				g = 0 // the lease is ending: no grace
			}
			// Lost while the command was stopping: SIGKILL at once.
			err = child.Stop(g, r.LeaseLost())
			err = fmt.Errorf("command %q stopped: %w (%v)", c.Argv[0], context.Cause(ctx), err)
		}
		if errors.Is(err, exec.ErrWaitDelay) {
			// The command exited well; something it started still held its
			// output open, and was not waited for.
			err = nil
			_, _ = out.Write([]byte("\n[leasehold: output closed " + outputWait.String() + " after the command exited: a process it left running held it open]"))
		}
		r.Report(out.String())
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
	return func(ctx context.Context, r schedule.Run) error {
		ctx, cancel := context.WithTimeoutCause(ctx, bound, fmt.Errorf("%w after %v", schedule.ErrTimeout, bound))
		defer cancel()
		// noAnswer names the bound when it is what stopped the request.
		noAnswer := func(err error) error {
			cause := context.Cause(ctx)
			switch {
			case ctx.Err() == nil || !errors.Is(cause, schedule.ErrTimeout):
				return err
			case errors.Is(err, schedule.ErrTimeout): // net/http reports the cause
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
