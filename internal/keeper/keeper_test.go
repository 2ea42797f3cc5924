package keeper

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var errGone = errors.New("lease gone")

// fixture runs a Keeper with a scripted Renew and records what it was told.
type fixture struct {
	t    *testing.T
	k    *Keeper
	cfg  Config
	lost chan error // Lost's argument, with the instant it was called
	at   chan time.Time

	mu      sync.Mutex
	renewed int
	failed  int
}

func newFixture(t *testing.T, timing Timing, every time.Duration, renew func(ctx context.Context) (time.Duration, error)) *fixture {
	f := &fixture{t: t, lost: make(chan error, 1), at: make(chan time.Time, 1)}
	f.cfg = Config{
		Timing: timing, Every: every, AttemptTimeout: every,
		Renew:   renew,
		IsLost:  func(err error) bool { return errors.Is(err, errGone) },
		Lost:    func(err error) { f.at <- time.Now(); f.lost <- err },
		Renewed: func(time.Duration) { f.mu.Lock(); f.renewed++; f.mu.Unlock() },
		Failed:  func(error, time.Duration) { f.mu.Lock(); f.failed++; f.mu.Unlock() },
	}
	return f
}

func (f *fixture) start(sent time.Time, granted time.Duration) (stop func()) {
	f.k = Start(f.cfg, sent, granted)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.k.Run(ctx) }()
	return func() { cancel(); <-done; f.k.Stop() }
}

func (f *fixture) waitLost() (error, time.Time) {
	f.t.Helper()
	select {
	case err := <-f.lost:
		return err, <-f.at
	case <-time.After(30 * time.Second):
		f.t.Fatal("the lease was never reported lost")
		return nil, time.Time{}
	}
}

func TestSpanIsGrantedLessDriftLessMargin(t *testing.T) {
	tm := Timing{Drift: 0.1, Margin: 200 * time.Millisecond}
	if got, want := tm.Span(10*time.Second), 9*time.Second-200*time.Millisecond; got != want {
		t.Fatalf("Span(10s) = %v, want 10s × 0.9 − 200ms = %v", got, want)
	}
	if got := DefaultMargin(2 * time.Second); got != 100*time.Millisecond {
		t.Fatalf("DefaultMargin(2s) = %v, want TTL/20 = 100ms", got)
	}
	if got := DefaultMargin(time.Minute); got != 500*time.Millisecond {
		t.Fatalf("DefaultMargin(1m) = %v, want the 500ms cap", got)
	}
}

func TestValidateNamesTheValue(t *testing.T) {
	for _, tc := range []struct {
		tm   Timing
		want string
	}{
		{Timing{Drift: 0.5}, "drift 0.5"},
		{Timing{Drift: -0.01}, "drift -0.01"},
		{Timing{Margin: -time.Second}, "margin -1s"},
	} {
		err := tc.tm.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %q", tc.tm, err, tc.want)
		}
	}
	if err := (Timing{Drift: DefaultDrift}).Validate(); err != nil {
		t.Fatalf("the default timing is refused: %v", err)
	}
}

// The deadline counts from the send time of the grant, however long ago
// that was — not from when the keeper was started.
func TestDeadlineCountsFromSendTime(t *testing.T) {
	tm := Timing{Drift: DefaultDrift, Margin: DefaultMargin(time.Minute)}
	f := newFixture(t, tm, 20*time.Second, func(ctx context.Context) (time.Duration, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	sent := time.Now().Add(-10 * time.Second)
	stop := f.start(sent, time.Minute)
	defer stop()
	if got, want := f.k.Deadline(), sent.Add(tm.Span(time.Minute)); !got.Equal(want) {
		t.Fatalf("deadline %v, want send time + span = %v", got, want)
	}
	if !f.k.Last().Equal(sent) {
		t.Fatalf("Last() = %v, want the send time %v", f.k.Last(), sent)
	}
}

// A renewal whose reply is slow moves the deadline to its send time + span,
// not to the reply's arrival + span.
func TestSlowRenewalCountsFromItsSendTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 2 * time.Second
		tm := Timing{Drift: DefaultDrift, Margin: DefaultMargin(ttl)}
		entered, reply := make(chan time.Time, 1), make(chan struct{})
		calls := 0
		f := newFixture(t, tm, 50*time.Millisecond, func(ctx context.Context) (time.Duration, error) {
			calls++
			if calls > 1 {
				<-ctx.Done() // later renewals hang; the test is about the first
				return 0, ctx.Err()
			}
			entered <- time.Now()
			<-reply
			return ttl, nil
		})
		stop := f.start(time.Now(), ttl)
		defer stop()
		in := <-entered
		// The reply comes 100 ms (of the bubble's clock) after the send.
		time.Sleep(100 * time.Millisecond)
		close(reply)
		replied := time.Now()
		synctest.Wait() // Run confirmed the renewal and waits for the next period
		f.mu.Lock()
		n := f.renewed
		f.mu.Unlock()
		if n != 1 {
			t.Fatalf("%d renewals confirmed, want the one whose reply came", n)
		}
		got := f.k.Deadline()
		if got.After(in.Add(tm.Span(ttl))) {
			t.Fatalf("deadline %v is later than the renewal's send time + span %v", got, in.Add(tm.Span(ttl)))
		}
		if !got.Before(replied.Add(tm.Span(ttl))) {
			t.Fatalf("deadline %v counts from the reply (%v), not the send", got, replied.Add(tm.Span(ttl)))
		}
		if !f.k.Last().Equal(got.Add(-tm.Span(ttl))) {
			t.Fatalf("Last() = %v, want the renewal's send time %v", f.k.Last(), got.Add(-tm.Span(ttl)))
		}
	})
}

// When renewals fail, the lease is reported lost at the deadline — even
// while a renewal hangs and ignores its context — and never before it.
func TestFailingRenewalsLoseAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 300 * time.Millisecond
		tm := Timing{Drift: DefaultDrift, Margin: DefaultMargin(ttl)}
		hang := make(chan struct{})
		defer close(hang)
		var (
			mu         sync.Mutex
			calls      int
			ctxBounded = true
		)
		var k *Keeper
		f := newFixture(t, tm, ttl/3, func(ctx context.Context) (time.Duration, error) {
			mu.Lock()
			calls++
			n := calls
			if d, ok := ctx.Deadline(); !ok || d.After(k.Deadline()) {
				ctxBounded = false
			}
			mu.Unlock()
			if n < 3 {
				return 0, errors.New("connection refused") // transient: retried
			}
			<-hang // the third hangs past the deadline, deaf to ctx
			return 0, errors.New("too late")
		})
		k = Start(f.cfg, time.Now(), ttl)
		f.k = k
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go k.Run(ctx)
		err, at := f.waitLost()
		if !errors.Is(err, ErrDeadline) {
			t.Fatalf("lost with %v, want ErrDeadline", err)
		}
		if at.Before(k.Deadline()) {
			t.Fatalf("reported lost at %v, before the deadline %v", at, k.Deadline())
		}
		select {
		case <-k.Lost():
		case <-time.After(30 * time.Second):
			t.Fatal("Lost() is never closed")
		}
		if !errors.Is(k.Err(), ErrDeadline) {
			t.Fatalf("Err() = %v, want ErrDeadline", k.Err())
		}
		mu.Lock()
		defer mu.Unlock()
		if calls < 3 {
			t.Fatalf("%d renewals, want the failures retried before the deadline", calls)
		}
		if !ctxBounded {
			t.Fatal("a renewal's context outlived the holder's deadline")
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.failed < 2 || f.renewed != 0 {
			t.Fatalf("failed %d, renewed %d; want the two failures reported and no renewal", f.failed, f.renewed)
		}
	})
}

// The backend saying the lease is gone ends it at once, with its error.
func TestBackendLossEndsTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 30 * time.Second
		f := newFixture(t, Timing{Drift: DefaultDrift, Margin: DefaultMargin(ttl)}, 10*time.Millisecond,
			func(context.Context) (time.Duration, error) { return 0, errGone })
		k := Start(f.cfg, time.Now(), ttl)
		done := make(chan struct{})
		go func() { defer close(done); k.Run(context.Background()) }()
		err, _ := f.waitLost()
		if !errors.Is(err, errGone) {
			t.Fatalf("lost with %v, want the backend's error", err)
		}
		<-done // Run returns by itself after a loss
		k.Stop()
	})
}

// A renewal confirmed after the deadline fired does not revive the lease.
func TestLateConfirmationDoesNotRevive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 300 * time.Millisecond
		tm := Timing{Drift: DefaultDrift, Margin: DefaultMargin(ttl)}
		release := make(chan struct{})
		f := newFixture(t, tm, ttl/3, func(ctx context.Context) (time.Duration, error) {
			<-release // answered "renewed" only after the deadline fired
			return ttl, nil
		})
		k := Start(f.cfg, time.Now(), ttl)
		first := k.Deadline()
		done := make(chan struct{})
		go func() { defer close(done); k.Run(context.Background()) }()
		err, _ := f.waitLost()
		close(release)
		<-done
		k.Stop()
		if !errors.Is(err, ErrDeadline) {
			t.Fatalf("lost with %v, want ErrDeadline", err)
		}
		if !k.Deadline().Equal(first) {
			t.Fatalf("deadline moved to %v after the lease was lost", k.Deadline())
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.renewed != 0 {
			t.Fatalf("a renewal was reported after the loss")
		}
	})
}

// After Stop, the deadline no longer fires.
func TestStopDisarmsTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 200 * time.Millisecond
		tm := Timing{Drift: DefaultDrift, Margin: DefaultMargin(ttl)}
		f := newFixture(t, tm, ttl/3, func(ctx context.Context) (time.Duration, error) { return 0, errors.New("down") })
		stop := f.start(time.Now(), ttl)
		stop()
		past := time.NewTimer(time.Until(f.k.Deadline().Add(100 * time.Millisecond)))
		defer past.Stop()
		select {
		case err := <-f.lost:
			t.Fatalf("lost with %v after Stop", err)
		case <-past.C:
		}
		if f.k.Err() != nil {
			t.Fatalf("Err() = %v after Stop", f.k.Err())
		}
	})
}

// A backend may grant less than was asked (ZooKeeper caps a TTL at its
// session timeout): a renewal period validated against the TTL asked for
// would then come after the grant's deadline, and every lease would lapse
// before its first renewal. The keeper renews such a grant before its
// deadline.
func TestShorterGrantIsRenewedBeforeItsDeadline(t *testing.T) {
	const asked, granted = 1200 * time.Millisecond, 300 * time.Millisecond
	t.Run("default margin", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			testShorterGrant(t, Timing{Drift: DefaultDrift, Margin: DefaultMargin(asked)}, asked, granted)
		})
	})
	// A fixed margin that leaves the short grant a span (77 ms) shorter
	// than granted/3.
	t.Run("large margin", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			testShorterGrant(t, Timing{Drift: DefaultDrift, Margin: 220 * time.Millisecond}, asked, granted)
		})
	})
}

func testShorterGrant(t *testing.T, tm Timing, asked, granted time.Duration) {
	f := newFixture(t, tm, asked/3, func(context.Context) (time.Duration, error) { return granted, nil })
	stop := f.start(time.Now(), granted)
	defer stop()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-f.lost:
			f.mu.Lock()
			n := f.renewed
			f.mu.Unlock()
			t.Fatalf("a %v grant with renew every %v was lost (%v) after %d renewals; want it renewed before its deadline", granted, asked/3, err, n)
		case <-deadline.C:
			t.Fatal("not renewed 5 times in 30 s")
		case <-tick.C:
		}
		f.mu.Lock()
		n := f.renewed
		f.mu.Unlock()
		if n >= 5 {
			return
		}
	}
}

// A renewal confirmed after the deadline passed must not move it, even
// when the deadline's timer has not run yet (a loaded host runs timers
// late): the holder's deadline has passed, and its Context must end. Here
// the deadline is long past when the confirmation comes, and the timer
// (due at once) has had no chance to run.
func TestConfirmationPastTheDeadlineDoesNotRevive(t *testing.T) {
	const ttl = 300 * time.Millisecond
	tm := Timing{Drift: DefaultDrift, Margin: DefaultMargin(ttl)}
	f := newFixture(t, tm, ttl/3, func(context.Context) (time.Duration, error) { return ttl, nil })
	k := Start(f.cfg, time.Now().Add(-time.Hour), ttl)
	first := k.Deadline()
	if k.extend(time.Now(), ttl) {
		k.Stop()
		t.Fatalf("a renewal confirmed %v after the deadline moved it to %v", time.Since(first).Round(time.Second), k.Deadline())
	}
	err, _ := f.waitLost()
	if !errors.Is(err, ErrDeadline) {
		t.Fatalf("lost with %v, want ErrDeadline", err)
	}
	k.Stop()
}

// A keeper started for a grant whose deadline has already passed (the
// reply was checked in time, then the host stalled) loses the lease at
// once — its timer fires at once, and must find itself armed (it read a
// nil timer before: a data race, and a nil dereference in the timer's
// goroutine that crashed the process).
func TestStartPastTheDeadlineLoses(t *testing.T) {
	const ttl = 300 * time.Millisecond
	tm := Timing{Drift: DefaultDrift, Margin: DefaultMargin(ttl)}
	for i := 0; i < 50; i++ {
		f := newFixture(t, tm, ttl/3, func(context.Context) (time.Duration, error) { return ttl, nil })
		k := Start(f.cfg, time.Now().Add(-ttl), ttl)
		err, _ := f.waitLost()
		if !errors.Is(err, ErrDeadline) {
			t.Fatalf("lost with %v, want ErrDeadline", err)
		}
		k.Stop()
	}
}
