package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
)

// Checks of the root package's Locker and Elector over the backend under
// test: what users see, including the holder's deadline.
func libraryChecks() []check {
	return []check{
		{"LockTryAcquireHeld", checkTryAcquireHeld},
		{"LockWatchdogKeepsLeaseAlive", checkWatchdog},
		{"LockDeadlineCountsFromSendTimeUnderDelayedReplies", checkDelayedReplies},
		{"LockRetryAfterLostReplyAnswersYours", checkLostAck},
		{"LockIndeterminateAcquireIsReportedAndCleanedUp", checkIndeterminate},
		{"LockLateAppliedAttemptNeverOutlivesLease", checkLateAppliedAttempt},
		{"LockDoSerialisesAndReportsLoss", checkDo},
		{"LockReleaseWithALostLocksContextIsNotReleased", checkReleaseEndedByLoss},
		{"LockWaitEndedByALostLocksContextIsNotLoss", checkWaitEndedByLoss},
		{"LockBadInputAndNilFuncs", checkLibraryBadInput},
		{"ElectionHandOverOnResign", checkResign},
		{"ElectionHandOverOnHolderDeath", checkHolderDeath},
	}
}

// libTTL is the lock TTL of the library checks: short, so that expiry tests
// are quick, and long enough for renewals on a loaded 2-core machine.
func (e *env) libTTL() time.Duration { return e.ttl(1200 * time.Millisecond) }

func (e *env) locker(t T, b backend.Leases, name string, opts ...leasehold.Option) *leasehold.Locker {
	t.Helper()
	opts = append([]leasehold.Option{
		leasehold.WithInstance(name), leasehold.WithTTL(e.libTTL()), leasehold.WithBackoff(time.Millisecond, 50*time.Millisecond),
	}, opts...)
	lk, err := leasehold.NewLocker(b, opts...)
	mustNil(t, err, "NewLocker")
	return lk
}

func checkTryAcquireHeld(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	l, err := e.locker(t, b, "a").TryAcquire(ctx, "svc/res")
	mustNil(t, err, "TryAcquire")
	defer l.Release(ctx)
	_, err = e.locker(t, b, "b").TryAcquire(ctx, "svc/res")
	var held *backend.HeldError
	if !errors.Is(err, leasehold.ErrLockNotAcquired) || !errors.As(err, &held) || held.Holder.Owner.Instance != "a" {
		t.Fatalf("TryAcquire of a held key: got %v, want ErrNotAcquired naming holder a", err)
	}
	_, err = e.locker(t, b, "a").TryAcquire(ctx, "svc/res")
	mustIs(t, err, leasehold.ErrLockNotAcquired, "TryAcquire by the same instance name (not re-entrant)")
}

func checkWatchdog(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	ttl := e.libTTL()
	l, err := e.locker(t, b, "a").Acquire(ctx, "svc/long")
	mustNil(t, err, "Acquire")
	hold := time.NewTimer(3 * ttl)
	select {
	case <-l.Done():
		t.Fatalf("lock lost after %v of a 3×TTL hold: %v", ttl, context.Cause(l.Context()))
	case <-hold.C:
	}
	got, err := b.Get(ctx, "default:lock:svc/long")
	mustNil(t, err, "Get while held")
	if got.Token != uint64(l.Token()) {
		t.Fatalf("backend token %d, lock token %d", got.Token, l.Token())
	}
	mustNil(t, l.Release(ctx), "Release")
	if !errors.Is(context.Cause(l.Context()), leasehold.ErrLockReleased) {
		t.Errorf("cause after Release = %v, want ErrReleased", context.Cause(l.Context()))
	}
	mustNil(t, l.Release(ctx), "second Release")
	_, err = b.Get(ctx, "default:lock:svc/long")
	mustIs(t, err, backend.ErrNotFound, "Get after Release")
	l2, err := e.locker(t, b, "b").TryAcquire(ctx, "svc/long")
	mustNil(t, err, "TryAcquire after Release")
	if l2.Token() <= l.Token() {
		t.Errorf("next token %d not greater than %d", l2.Token(), l.Token())
	}
	_ = l2.Release(ctx)
}

// checkDelayedReplies delays every renew reply by 0.6×TTL after the backend
// applied it. A holder that counts its deadline from a reply's arrival keeps
// believing it holds the lease past the backend's expiry; one that counts
// from the send time gives up in time. The check: the lock's context must be
// done no later than the latest send time of an applied acquire/renew plus
// the TTL granted — the earliest the backend may expire the lease.
func checkDelayedReplies(t T, e *env) {
	f := newFaulty(e.new())
	ctx := e.ctx()
	ttl := e.libTTL()
	l, err := e.locker(t, f, "a").TryAcquire(ctx, "svc/slow")
	mustNil(t, err, "TryAcquire")
	defer l.Release(ctx)
	f.setRenewDelay(ttl * 6 / 10)
	var doneAt time.Time
	select {
	case <-l.Done():
		doneAt = time.Now()
	case <-time.After(20 * ttl):
		t.Fatalf("lock context still alive after %v of renew replies delayed by %v (TTL %v): the deadline is not counted from send time",
			20*ttl, ttl*6/10, ttl)
	}
	if !errors.Is(context.Cause(l.Context()), leasehold.ErrLeaseLost) {
		t.Errorf("cause = %v, want ErrLeaseLost", context.Cause(l.Context()))
	}
	var expiry time.Time // earliest possible backend expiry of the latest applied grant
	for _, c := range f.history() {
		if c.applied && c.entered.Before(doneAt) {
			if x := c.entered.Add(c.granted); x.After(expiry) {
				expiry = x
			}
		}
	}
	if doneAt.After(expiry) {
		t.Fatalf("holder's context outlived the lease: done %v after the earliest possible expiry", doneAt.Sub(expiry))
	}
	t.Logf("context done %v before the earliest possible expiry", expiry.Sub(doneAt))
}

func checkLostAck(t T, e *env) {
	f := newFaulty(e.new())
	ctx := e.ctx()
	f.loseAcquireAcks(1)
	l, err := e.locker(t, f, "a").TryAcquire(ctx, "svc/ack")
	mustNil(t, err, "TryAcquire whose first reply was lost")
	defer l.Release(ctx)
	got, err := f.Leases.Get(ctx, "default:lock:svc/ack")
	mustNil(t, err, "Get")
	if got.Token != uint64(l.Token()) || got.Owner.Instance != "a" {
		t.Fatalf("backend holds %+v, lock has token %d", got, l.Token())
	}
	var applied int
	for _, c := range f.history() {
		if c.op == "acquire" && c.applied {
			applied++
		}
	}
	if applied != 2 {
		t.Fatalf("%d applied acquires, want 2 (the lost one and its retry answering yours)", applied)
	}
}

func checkIndeterminate(t T, e *env) {
	f := newFaulty(e.new())
	ctx := e.ctx()
	f.loseAcquireAcks(1000) // every reply is lost after the write was applied
	_, err := e.locker(t, f, "a").TryAcquire(ctx, "svc/unknown")
	mustIs(t, err, leasehold.ErrOutcomeIndeterminate, "TryAcquire whose replies are all lost")
	// Acquire returns when it gives up; the search for the orphaned grant
	// runs after it, bounded by 2 s.
	eventually(t, 5*time.Second, "the applied grant released, not orphaned, after the library gave up", func() bool {
		_, err := f.Leases.Get(ctx, "default:lock:svc/unknown")
		return errors.Is(err, backend.ErrNotFound)
	})
}

func checkDo(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	var inside, max atomic.Int32
	var wg sync.WaitGroup
	var tokens sync.Map
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk := e.locker(t, b, "w"+string(rune('0'+i)))
			for range 5 {
				err := lk.Do(ctx, "svc/do", func(ctx context.Context, tok leasehold.Token) error {
					if n := inside.Add(1); n > max.Load() {
						max.Store(n)
					}
					tokens.Store(tok, true)
					time.Sleep(time.Millisecond) // work inside the critical section
					inside.Add(-1)
					return nil
				})
				if err != nil {
					t.Errorf("Do: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	n := 0
	tokens.Range(func(any, any) bool { n++; return true })
	if max.Load() != 1 || n != 20 {
		t.Fatalf("Do: %d at once at most (want 1), %d distinct tokens (want 20)", max.Load(), n)
	}
	// A lock lost while fn runs is reported even if fn returns nil.
	f := newFaulty(b)
	err := e.locker(t, f, "loser").Do(ctx, "svc/do-lost", func(ctx context.Context, _ leasehold.Token) error {
		f.partition(true)
		<-ctx.Done()
		return nil
	})
	mustIs(t, err, leasehold.ErrLeaseLost, "Do whose lock was lost")
}

func checkLibraryBadInput(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	lk := e.locker(t, b, "a")
	for _, key := range []string{"", "/a", "a/", "a//b", "a/../b", "a b", "ключ"} {
		_, err := lk.TryAcquire(ctx, key)
		mustIs(t, err, leasehold.ErrInvalid, "TryAcquire("+key+")")
	}
	mustIs(t, lk.Do(ctx, "svc/x", nil), leasehold.ErrInvalid, "Do with nil fn")
	el, err := leasehold.NewElector(b, "role", leasehold.Callbacks{}, leasehold.WithTTL(e.libTTL()))
	mustNil(t, err, "NewElector")
	mustIs(t, el.Run(ctx, nil), leasehold.ErrInvalid, "Run with nil fn")
	_, err = leasehold.NewLocker(b, leasehold.WithTTL(e.libTTL()), leasehold.WithRenewDeadline(2*e.libTTL()))
	mustIs(t, err, leasehold.ErrInvalid, "renew deadline ≥ TTL")
	_, err = leasehold.NewLocker(nil)
	mustIs(t, err, leasehold.ErrInvalid, "nil backend")
	ls, err := b.List(ctx, "", 0)
	mustNil(t, err, "List")
	if len(ls) != 0 {
		t.Errorf("rejected calls left %d leases", len(ls))
	}
}

type events struct {
	mu  sync.Mutex
	log []string
	at  map[string]time.Time
}

func (ev *events) add(s string) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	ev.log = append(ev.log, s)
	if ev.at == nil {
		ev.at = map[string]time.Time{}
	}
	if _, ok := ev.at[s]; !ok {
		ev.at[s] = time.Now()
	}
}

// String returns the log, for failure messages.
func (ev *events) String() string {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return fmt.Sprint(ev.log)
}

func (ev *events) has(s string) bool {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	_, ok := ev.at[s]
	return ok
}

func (ev *events) when(s string) time.Time {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return ev.at[s]
}

func (e *env) elector(t T, b backend.Leases, name string, ev *events, tokens *sync.Map) *leasehold.Elector {
	t.Helper()
	el, err := leasehold.NewElector(b, "svc/leader", leasehold.Callbacks{
		OnElected:   func(tok leasehold.Token) { tokens.Store(name, tok); ev.add(name + " elected") },
		OnDemoted:   func() { ev.add(name + " demoted") },
		OnNewLeader: func(id string) { ev.add(name + " sees " + id) },
	}, leasehold.WithInstance(name), leasehold.WithTTL(e.libTTL()), leasehold.WithBackoff(time.Millisecond, 50*time.Millisecond))
	mustNil(t, err, "NewElector")
	return el
}

// runElector runs el until ctx ends; the returned channel yields Run's error.
func runElector(ctx context.Context, el *leasehold.Elector, name string, ev *events) <-chan error {
	out := make(chan error, 1)
	go func() {
		out <- el.Run(ctx, func(lctx context.Context) error {
			ev.add(name + " working")
			<-lctx.Done()
			ev.add(name + " stopped")
			return nil
		})
	}()
	return out
}

func checkResign(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	ev, tokens := &events{}, &sync.Map{}
	a, bb := e.elector(t, b, "A", ev, tokens), e.elector(t, b, "B", ev, tokens)
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	aDone := runElector(actx, a, "A", ev)
	eventually(t, 10*time.Second, "A elected", func() bool { return ev.has("A working") })
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	bDone := runElector(bctx, bb, "B", ev)
	eventually(t, 10*time.Second, "B observes A as leader", func() bool { return ev.has("B sees A") })
	ld, err := bb.Leader(ctx)
	mustNil(t, err, "Leader")
	if ld.Identity != "A" {
		t.Fatalf("Leader = %+v, want A", ld)
	}
	mustNil(t, a.Resign(ctx), "Resign")
	if !ev.has("A stopped") || !ev.has("A demoted") {
		t.Fatalf("Resign returned before A's work stopped and A was demoted: %v", ev)
	}
	mustNil(t, <-aDone, "A's Run after Resign")
	eventually(t, 10*time.Second, "B elected after A resigned", func() bool { return ev.has("B working") })
	if ev.when("B elected").Before(ev.when("A stopped")) {
		t.Fatalf("B was elected before A's work stopped: %v", ev)
	}
	ta, _ := tokens.Load("A")
	tb, _ := tokens.Load("B")
	if tb.(leasehold.Token) <= ta.(leasehold.Token) {
		t.Fatalf("B's token %v not greater than A's %v", tb, ta)
	}
	bcancel()
	mustNil(t, <-bDone, "B's Run after its context ended")
	eventually(t, 10*time.Second, "B demoted", func() bool { return ev.has("B demoted") })
	_, err = bb.Leader(ctx)
	mustIs(t, err, leasehold.ErrNoLeader, "Leader after everyone left")
}

func checkHolderDeath(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	f := newFaulty(b)
	ev, tokens := &events{}, &sync.Map{}
	a, bb := e.elector(t, f, "A", ev, tokens), e.elector(t, b, "B", ev, tokens)
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	aDone := runElector(actx, a, "A", ev)
	eventually(t, 10*time.Second, "A elected", func() bool { return ev.has("A working") })
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	bDone := runElector(bctx, bb, "B", ev)
	f.partition(true) // A can no longer reach the backend: to the cluster, A is dead
	eventually(t, 20*e.libTTL(), "B elected after A's lease expired", func() bool { return ev.has("B working") })
	if !ev.has("A stopped") {
		t.Fatalf("B leads but A's work was not stopped: %v", ev)
	}
	if ev.when("A stopped").After(ev.when("B elected")) {
		t.Fatalf("A's work stopped after B was elected: %v", ev)
	}
	ta, _ := tokens.Load("A")
	tb, _ := tokens.Load("B")
	if tb.(leasehold.Token) <= ta.(leasehold.Token) {
		t.Fatalf("B's token %v not greater than A's %v", tb, ta)
	}
	acancel()
	bcancel()
	mustNil(t, <-aDone, "A's Run")
	mustNil(t, <-bDone, "B's Run")
}

// checkReleaseEndedByLoss: Release called with a context that another
// lock's loss already ended (cause ErrLeaseLost: an inner lock released
// inside an outer lock's Do, an election's leader context) cannot reach
// the backend, so it must not report the lock released: either the lease
// is gone, or the error says the outcome is unknown. A not-sent request
// whose error matched the cause read as "not held any more" and returned
// nil, the lease still held.
func checkReleaseEndedByLoss(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	l, err := e.locker(t, b, "a", leasehold.WithTTL(e.ttl(30*time.Second))).Acquire(ctx, "svc/inner")
	mustNil(t, err, "Acquire")
	ended, cancel := context.WithCancelCause(ctx)
	cancel(fmt.Errorf("the outer lock: %w", leasehold.ErrLeaseLost))
	rerr := l.Release(ended)
	got, gerr := b.Get(ctx, "default:lock:svc/inner")
	switch {
	case rerr == nil && gerr == nil:
		t.Fatalf("Release with an ended context returned nil, yet the lease is still held (token %d, %v left)", got.Token, got.Remaining)
	case rerr != nil && !errors.Is(rerr, leasehold.ErrOutcomeIndeterminate):
		t.Errorf("Release with an ended context: %v, want nil or ErrOutcomeIndeterminate", rerr)
	}
	if gerr == nil {
		mustNil(t, b.Release(ctx, "default:lock:svc/inner", got.Owner, got.Token), "backend Release")
	}
}

// checkWaitEndedByLoss: an Acquire or Do whose context was ended by a lost
// lock (cause ErrLeaseLost) never reports that loss as its own. Waiting
// behind this process's holder of the key, or sent nothing, it acquired
// nothing and fn did not run: the error wraps ErrLockNotAcquired and
// ctx.Err(), never ErrLeaseLost (which, from Do, says fn ran and lost its
// lock). On a free key the backend may not say whether the request was
// applied; it still must not say "lost", and a "not acquired" leaves the
// key free.
func checkWaitEndedByLoss(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	lk := e.locker(t, b, "a", leasehold.WithTTL(e.ttl(30*time.Second)))
	holder, err := lk.Acquire(ctx, "svc/turn")
	mustNil(t, err, "Acquire")
	defer holder.Release(ctx)
	ended, cancel := context.WithCancelCause(ctx)
	cancel(fmt.Errorf("the outer lock: %w", leasehold.ErrLeaseLost))
	notLoss := func(what string, err error) {
		t.Helper()
		if errors.Is(err, leasehold.ErrLeaseLost) || !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a context a lost lock ended: %v; want an error matching context.Canceled and not ErrLeaseLost", what, err)
		}
	}
	_, err = lk.Acquire(ended, "svc/turn")
	notLoss("Acquire behind this process's holder", err)
	mustIs(t, err, leasehold.ErrLockNotAcquired, "Acquire behind this process's holder")
	ran := false
	err = lk.Do(ended, "svc/turn", func(context.Context, leasehold.Token) error { ran = true; return nil })
	notLoss("Do behind this process's holder", err)
	mustIs(t, err, leasehold.ErrLockNotAcquired, "Do behind this process's holder")
	if ran {
		t.Errorf("Do ran fn with a context that had ended before the call")
	}
	// TryAcquire does not queue, so the backend is always asked (Acquire's
	// wait for its turn and its ended context are both ready on a free key).
	l, err := lk.TryAcquire(ended, "svc/free")
	if err == nil {
		l.Release(ctx)
		t.Fatalf("TryAcquire of a free key with an ended context was granted")
	}
	notLoss("TryAcquire of a free key", err)
	if errors.Is(err, leasehold.ErrLockNotAcquired) {
		if got, gerr := b.Get(ctx, "default:lock:svc/free"); gerr == nil {
			t.Errorf("TryAcquire with an ended context said not acquired (%v), yet the key is held (token %d)", err, got.Token)
		}
	}
}
