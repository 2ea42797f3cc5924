package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/model"
)

// The randomized workload: keys, jobs and occurrences are few, so that
// clients contend and each porcupine partition stays small.
const (
	rndKeys        = 4
	rndOccurrences = 6 // per job; ≤ model.MaxOccurrences
	rndRetries     = 2 // retries of an acquire, claim or reclaim whose outcome is unknown
	rndOpTimeout   = 10 * time.Second
	rndPruneBatch  = 10000                 // more than a run ever finishes: a Prune deletes every finished run
	rndThink       = 12 * time.Millisecond // a client's pause between requests is up to this
)

// rndJob is one of the workload's jobs and its MaxRunning (0: no limit).
type rndJob struct {
	name       string
	maxRunning int
}

// ledgerOps is the part of the run ledger the workload calls (faultyLedger).
type ledgerOps interface {
	Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error)
	Reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error)
	Heartbeat(ctx context.Context, req backend.HeartbeatRequest) error
	Finish(ctx context.Context, req backend.FinishRequest) error
	Abandon(ctx context.Context, job string, at time.Time) error
	Prune(ctx context.Context, olderThan time.Time, batch int) (int, error)
}

// workload is one randomized run against one fresh backend.
type workload struct {
	seed      uint64
	b         budget
	leases    *faulty
	ledger    ledgerOps // nil: the backend keeps no ledger
	jobs      []rndJob
	short     time.Duration
	long      time.Duration
	instants  []time.Time // the occurrences' scheduled instants
	origin    time.Time   // the history's time 0
	remaining atomic.Int64
	deadline  time.Time

	mu   sync.Mutex
	hist history
}

// history is what a run recorded.
type history struct {
	leases, ledger []porcupine.Operation
	late           []lateOp // held requests: their return is their late reply
	results        map[string]int
	granted        int
	problems       []string
}

// lateOp is a recorded request that was held and delivered late.
type lateOp struct {
	ledger bool
	i      int
	done   <-chan time.Time
}

func (h *history) ops() int { return len(h.leases) + len(h.ledger) }

func (h *history) summary() string {
	var ks []string
	for k := range h.results {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for i, k := range ks {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%d", k, h.results[k])
	}
	return b.String()
}

func newWorkload(e *env, seed uint64, b budget) *workload {
	l := e.new()
	w := &workload{seed: seed, b: b, leases: newFaulty(l), jobs: []rndJob{{"rnd.free", 0}, {"rnd.limited", 2}}, short: e.ttl(60 * time.Millisecond), long: e.ttl(time.Second)}
	if led, ok := l.(backend.Ledger); ok {
		w.ledger = &faultyLedger{f: w.leases, led: led}
	}
	base := backend.Instant(time.Now().Add(-time.Hour)).Truncate(time.Second)
	for i := range rndOccurrences {
		w.instants = append(w.instants, base.Add(time.Duration(i)*time.Second))
	}
	w.hist.results = map[string]int{}
	return w
}

func (w *workload) now() int64 { return int64(time.Since(w.origin)) }

// run lets the clients loose, waits for them and for every held request's
// late delivery, and returns the history.
func (w *workload) run() *history {
	w.origin = time.Now()
	w.deadline = w.origin.Add(w.b.span)
	w.remaining.Store(int64(w.b.ops))
	var wg sync.WaitGroup
	for c := range w.b.clients {
		wg.Go(func() { w.client(c) })
	}
	wg.Wait()
	for _, l := range w.hist.late {
		end := int64((<-l.done).Sub(w.origin))
		ops := w.hist.leases
		if l.ledger {
			ops = w.hist.ledger
		}
		ops[l.i].Return = max(ops[l.i].Return, end)
		switch in := ops[l.i].Input.(type) {
		case model.LeaseInput:
			in.Ret = ops[l.i].Return
			ops[l.i].Input = in
		case model.LedgerInput:
			in.Ret = ops[l.i].Return
			ops[l.i].Input = in
		}
	}
	return &w.hist
}

// client is one client's loop: its own random source, its own lease and
// claim at most.
type client struct {
	w       *workload
	id      int
	rng     *rand.Rand
	pending []chan struct{} // held requests, delivered after this client's next request
	lease   *heldLease
	claim   *heldClaim
}

type heldLease struct {
	key   string
	owner backend.Owner
	token uint64
	ttl   time.Duration
}

type heldClaim struct {
	job   int
	occ   int
	owner backend.Owner
	token uint64
	ttl   time.Duration
}

func (w *workload) client(id int) {
	c := &client{w: w, id: id, rng: rand.New(rand.NewPCG(w.seed, uint64(id)))}
	defer c.deliverHeld()
	for time.Now().Before(w.deadline) && w.remaining.Add(-1) >= 0 {
		// Pace the clients, so that a run spans leases that expire, on a
		// fast backend too: a workload's think time, not a wait for a result.
		time.Sleep(time.Duration(c.rng.IntN(int(rndThink))))
		if w.ledger != nil && c.rng.IntN(2) == 0 {
			c.ledgerStep()
		} else {
			c.leaseStep()
		}
	}
}

// deliverHeld lets this client's held requests go on to the backend.
func (c *client) deliverHeld() {
	for _, ch := range c.pending {
		close(ch)
	}
	c.pending = nil
}

func (c *client) ttl() time.Duration {
	if c.rng.IntN(5) < 2 {
		return c.w.short
	}
	return c.w.long
}

// do makes one request under a random fault and records it: rec gets the
// answer and the instants the request was sent and answered, and returns
// the operation for the model (do sets its client and interval). A
// retryable request (acquire, claim, reclaim) may be held and delivered
// late, after this client's next request.
func (c *client) do(retryable, ledger bool, req func(ctx context.Context) error, rec func(err error, call, ret int64) porcupine.Operation) {
	held := c.pending
	c.pending = nil
	ctx, cancel := context.WithTimeout(context.Background(), rndOpTimeout)
	defer cancel()
	var late chan time.Time
	switch r := c.rng.Float64(); {
	case r < 0.06:
		ctx = withFault(ctx, &injection{kind: replyDelayed, delay: time.Duration(5+c.rng.IntN(20)) * time.Millisecond})
	case r < 0.11:
		ctx = withFault(ctx, &injection{kind: replyLost})
	case r < 0.15:
		ctx = withFault(ctx, &injection{kind: notSent})
	case r < 0.21 && retryable:
		release := make(chan struct{})
		late = make(chan time.Time, 1)
		c.pending = append(c.pending, release)
		ctx = withFault(ctx, &injection{kind: heldLate, release: release, done: late, within: rndOpTimeout})
	}
	call := c.w.now()
	err := req(ctx)
	ret := c.w.now()
	for _, ch := range held {
		close(ch)
	}
	op := rec(err, call, ret)
	op.ClientId, op.Call, op.Return = c.id, call, ret
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	kind, res := outcome(op)
	w.hist.results[kind+"/"+res]++
	if res == model.OK && (kind == model.Acquire || kind == model.Claim || kind == model.Reclaim) {
		w.hist.granted++
	}
	ops := &w.hist.leases
	if ledger {
		ops = &w.hist.ledger
	}
	*ops = append(*ops, op)
	if late != nil {
		w.hist.late = append(w.hist.late, lateOp{ledger: ledger, i: len(*ops) - 1, done: late})
	}
}

// outcome returns a recorded operation's kind and result.
func outcome(op porcupine.Operation) (kind, result string) {
	switch o := op.Output.(type) {
	case model.LeaseOutput:
		return op.Input.(model.LeaseInput).Kind, o.Result
	case model.LedgerOutput:
		return op.Input.(model.LedgerInput).Kind, o.Result
	}
	return "", ""
}

// problem records a misbehaviour the model does not judge (an answer no
// request of the workload should get).
func (c *client) problem(f string, a ...any) {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	c.w.hist.problems = append(c.w.hist.problems, fmt.Sprintf(f, a...))
}

// result classifies an answer for the model. An error the contract does
// not name (a timeout, a lost connection, the injected fault) leaves the
// outcome unknown.
func (c *client) result(what string, err error) string {
	switch {
	case err == nil:
		return model.OK
	case errors.Is(err, backend.ErrNotApplied):
		return model.Refused
	case errors.Is(err, backend.ErrLeaseHeld):
		return model.Held
	case errors.Is(err, backend.ErrLeaseLost):
		return model.Lost
	case errors.Is(err, backend.ErrOccurrenceClaimed):
		return model.Claimed
	case errors.Is(err, backend.ErrNotFound):
		return model.NotFound
	case errors.Is(err, backend.ErrLeaseNotExpired):
		return model.NotExpired
	case errors.Is(err, backend.ErrOccurrenceOverlap):
		return model.Overlap
	case errors.Is(err, backend.ErrInvalid), errors.Is(err, backend.ErrClosed),
		errors.Is(err, backend.ErrOccurrenceTooEarly), errors.Is(err, backend.ErrOccurrenceTooLate):
		c.problem("%s: unexpected answer: %v", what, err)
		return model.Refused
	}
	return model.Indeterminate
}
