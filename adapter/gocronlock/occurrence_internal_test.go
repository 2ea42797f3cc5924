package gocronlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

// lockAt is what gocron does when a timer fires: Lock the job's name, run,
// Unlock. It reports whether this instance ran the occurrence.
func lockAt(t *testing.T, l *Locker, now time.Time) bool {
	t.Helper()
	lk, err := l.claim(context.Background(), "report", now) // past the job check: no scheduler here
	if errors.Is(err, backend.ErrOccurrenceClaimed) {
		return false
	}
	if err != nil {
		t.Fatalf("Lock at %v: %v", now, err)
	}
	if err := lk.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	return true
}

// Two instances whose timers for one occurrence fire 2 ms apart, both about
// half a quantum late: rounding the firing time to the quantum gave the two
// different keys, and both ran.
func TestHalfwaySkewRunsOnce(t *testing.T) {
	b := memory.New()
	a, _ := NewLocker(b, "a", time.Second)
	c, _ := NewLocker(b, "c", time.Second)
	due := time.Now().Truncate(time.Second).Add(-5 * time.Second) // the occurrence both timers fired for
	ranA := lockAt(t, a, due.Add(499*time.Millisecond))
	ranC := lockAt(t, c, due.Add(501*time.Millisecond))
	if ranA == ranC {
		t.Fatalf("occurrence %v: a ran %v, c ran %v (want exactly one)", due, ranA, ranC)
	}
}

// A timer later than half the period must still claim its own occurrence,
// not the next one (which would then be refused when its own timers fire).
func TestLateTimerClaimsItsOwnOccurrence(t *testing.T) {
	b := memory.New()
	late, _ := NewLocker(b, "late", time.Minute)
	onTime, _ := NewLocker(b, "ontime", time.Minute)
	due := time.Now().Truncate(time.Minute).Add(-3 * time.Minute)
	if !lockAt(t, late, due.Add(40*time.Second)) {
		t.Fatal("the late timer found its occurrence claimed already")
	}
	if !lockAt(t, onTime, due.Add(time.Minute)) {
		t.Fatalf("the next occurrence %v was claimed early by the late timer of %v", due.Add(time.Minute), due)
	}
}

// NewJobLocker names the occurrence from the job's own spec, whose gaps
// need not be a fixed quantum: "*/7" seconds fires at :49, :56 and then :00
// (a 4 s gap). Both timers 2 ms either side of the middle of a gap run the
// occurrence once, and a timer 3.5 s late for :56 still names :56.
func TestJobLockerNamesTheSpecsInstant(t *testing.T) {
	b := memory.New()
	a, err := NewJobLocker(b, "a", "*/7 * * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := NewJobLocker(b, "c", "*/7 * * * * *", "")
	m := time.Now().Truncate(time.Minute).Add(-2 * time.Minute)
	cases := []struct {
		due, fired time.Duration // from m
	}{
		{49 * time.Second, 52*time.Second + 499*time.Millisecond}, // gap 49→56 s, halfway at 52.5 s
		{56 * time.Second, 59*time.Second + 500*time.Millisecond}, // 3.5 s late, gap 56→60 s
		{60 * time.Second, 60*time.Second - 300*time.Millisecond}, // 300 ms early (E = 400 ms)
	}
	for _, k := range cases {
		due := m.Add(k.due)
		if !lockAt(t, a, m.Add(k.fired)) {
			t.Fatalf("a's timer for %v (fired at %v) found it claimed", due, m.Add(k.fired))
		}
		if lockAt(t, c, m.Add(k.fired+2*time.Millisecond)) {
			t.Fatalf("occurrence %v ran twice: c's timer 2 ms after a's named another key", due)
		}
		if lockAt(t, c, due) {
			t.Fatalf("occurrence %v ran twice: c's on-time timer named another key", due)
		}
	}
}

func TestJobLockerRefusesABadSpec(t *testing.T) {
	_, err := NewJobLocker(memory.New(), "a", "61 * * * *", "")
	if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), `"61 * * * *"`) {
		t.Fatalf("NewJobLocker(61 * * * *) = %v, want ErrInvalid naming the spec", err)
	}
	_, err = NewJobLocker(memory.New(), "a", "* * * * *", "Mars/Olympus")
	if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), "Mars/Olympus") {
		t.Fatalf("NewJobLocker(zone Mars/Olympus) = %v, want ErrInvalid naming the zone", err)
	}
}
