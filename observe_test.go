package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// eventLog records observed events; safe for concurrent use.
type eventLog struct {
	mu  sync.Mutex
	evs []leasehold.Event
}

func (l *eventLog) ObserveLock(ev leasehold.Event) {
	l.mu.Lock()
	l.evs = append(l.evs, ev)
	l.mu.Unlock()
}

func (l *eventLog) find(kind leasehold.EventKind) []leasehold.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []leasehold.Event
	for _, ev := range l.evs {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// waitFor waits until at least n events of kind were observed (in the
// test's synctest bubble: its 10 s are virtual).
func (l *eventLog) waitFor(t *testing.T, kind leasehold.EventKind, n int) []leasehold.Event {
	t.Helper()
	eventually.True(t, 10*time.Second, fmt.Sprintf("%d %s events observed", n, kind), func() bool { return len(l.find(kind)) >= n })
	return l.find(kind)
}

func TestObserverLockEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := memory.New()
		defer b.Close()
		var log eventLog
		lk, err := leasehold.NewLocker(b, leasehold.WithObserver(&log), leasehold.WithNamespace("obs"),
			leasehold.WithTTL(300*time.Millisecond), leasehold.WithRenewEvery(50*time.Millisecond), leasehold.WithRenewDeadline(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		l, err := lk.TryAcquire(ctx, "jobs/a")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lk.TryAcquire(ctx, "jobs/a"); !errors.Is(err, leasehold.ErrLockNotAcquired) {
			t.Fatalf("second TryAcquire: %v, want ErrNotAcquired", err)
		}
		acq := log.find(leasehold.EventAcquire)
		if len(acq) != 2 || acq[0].Result != leasehold.ResultOK || acq[1].Result != leasehold.ResultHeld {
			t.Fatalf("acquire events %+v, want ok then held", acq)
		}
		if acq[0].Key != "jobs/a" || acq[0].Namespace != "obs" || acq[0].Backend != "memory" || acq[0].Token != l.Token() {
			t.Fatalf("acquire event %+v does not describe the grant (token %d)", acq[0], l.Token())
		}
		ren := log.waitFor(t, leasehold.EventRenew, 2)
		if ren[0].Token != l.Token() || ren[0].Result != leasehold.ResultOK {
			t.Fatalf("renew event %+v", ren[0])
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		rel := log.find(leasehold.EventRelease)
		if len(rel) != 1 || rel[0].Result != leasehold.ResultOK || rel[0].Token != l.Token() {
			t.Fatalf("release events %+v", rel)
		}
		if lost := log.find(leasehold.EventLost); len(lost) != 0 {
			t.Fatalf("a released lock reported lost: %+v", lost)
		}

		// Lost: someone else releases our grant on the backend (an operator
		// freeing a stuck key); the next renewal is told, exactly one lost event.
		l2, err := lk.TryAcquire(ctx, "jobs/b")
		if err != nil {
			t.Fatal(err)
		}
		cur, err := b.Get(ctx, leasehold.LockKey("obs", "jobs/b"))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, cur.Key, cur.Owner, cur.Token); err != nil {
			t.Fatal(err)
		}
		<-l2.Done()
		lost := log.waitFor(t, leasehold.EventLost, 1)
		if lost[0].Key != "jobs/b" || !errors.Is(lost[0].Err, leasehold.ErrLeaseLost) {
			t.Fatalf("lost event %+v", lost[0])
		}
		_ = l2.Release(ctx)

		// Renewal failures: the backend is closed under a holder; renewals fail
		// until the holder's deadline passes, then it is lost.
		l3, err := lk.TryAcquire(ctx, "jobs/c")
		if err != nil {
			t.Fatal(err)
		}
		b.Close()
		<-l3.Done()
		fails := log.waitFor(t, leasehold.EventRenewFailed, 1)
		if fails[0].Key != "jobs/c" || fails[0].Err == nil {
			t.Fatalf("renew-failed event %+v", fails[0])
		}
		log.waitFor(t, leasehold.EventLost, 2)
		if n := len(log.find(leasehold.EventLost)); n != 2 {
			t.Fatalf("%d lost events, want 2 (one per lost lock)", n)
		}
	})
}

func TestObserverElectionEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		defer b.Close()
		var log eventLog
		el, err := leasehold.NewElector(b, "consumer", leasehold.Callbacks{}, leasehold.WithObserver(&log), leasehold.WithInstance("a"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- el.Run(ctx, func(lctx context.Context) error { <-lctx.Done(); return nil })
		}()
		elected := log.waitFor(t, leasehold.EventElected, 1)
		if elected[0].Role != "consumer" || elected[0].Key != "" || elected[0].Token == 0 {
			t.Fatalf("elected event %+v", elected[0])
		}
		if err := el.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		dem := log.find(leasehold.EventDemoted)
		if len(dem) != 1 || dem[0].Result != leasehold.ResultResigned || dem[0].Token != elected[0].Token {
			t.Fatalf("demoted events %+v", dem)
		}
		nl := log.find(leasehold.EventNewLeader)
		if len(nl) != 1 || nl[0].Leader != "a" {
			t.Fatalf("new-leader events %+v", nl)
		}
		kinds := []string{}
		for _, ev := range log.evs {
			kinds = append(kinds, ev.Kind.String())
		}
		if !slices.Contains(kinds, "acquire") || !slices.Contains(kinds, "release") {
			t.Fatalf("an election's lease events are missing: %v", kinds)
		}
	})
}
