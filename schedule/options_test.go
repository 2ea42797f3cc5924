package schedule_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/schedule"
)

// Every option refuses a bad argument with ErrInvalid, naming the option and
// the value; an option of the Locker's own is refused by New and one of the
// Scheduler's own by NewLocker.
func TestOptionsValidated(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	for _, tc := range []struct {
		name string
		opts []schedule.Option
		want string
	}{
		{"empty instance", []schedule.Option{leasehold.WithInstance("")}, `WithInstance("")`},
		{"long instance", []schedule.Option{leasehold.WithInstance(strings.Repeat("i", 129))}, `WithInstance("iii`},
		{"namespace", []schedule.Option{leasehold.WithNamespace("a/../b")}, `WithNamespace("a/../b")`},
		{"drift", []schedule.Option{leasehold.WithDrift(0.5)}, "WithDrift(0.5)"},
		{"margin", []schedule.Option{leasehold.WithMargin(-time.Millisecond)}, "WithMargin(-1ms)"},
		{"logger", []schedule.Option{leasehold.WithLogger(nil)}, "WithLogger(nil)"},
		{"deprecated instance", []schedule.Option{schedule.WithInstance("")}, `WithInstance("")`},
		{"deprecated drift", []schedule.Option{schedule.WithDrift(-1)}, "WithDrift(-1)"},
		{"clock", []schedule.Option{schedule.WithClock(nil)}, "WithClock(nil)"},
		{"grace", []schedule.Option{schedule.WithGrace(-time.Second)}, "WithGrace(-1s)"},
		{"tolerance", []schedule.Option{schedule.WithClaimTolerance(-time.Second)}, "WithClaimTolerance(-1s)"},
		{"retention", []schedule.Option{schedule.WithRetention(0)}, "WithRetention(0s)"},
		{"sweep", []schedule.Option{schedule.WithSweepEvery(-time.Second)}, "WithSweepEvery(-1s)"},
		{"settle", []schedule.Option{schedule.WithVersionSettle(0)}, "WithVersionSettle(0s)"},
		{"settle within tolerance", []schedule.Option{schedule.WithClaimTolerance(2 * time.Second), schedule.WithVersionSettle(time.Second)}, "version settle 1s must exceed the claim tolerance 2s"},
		{"a Locker's option", []schedule.Option{leasehold.WithTTL(time.Second)}, "leasehold.WithTTL configures a Locker or an Elector, not a Scheduler"},
		{"a Locker's observer", []schedule.Option{leasehold.WithObserver(nil)}, "leasehold.WithObserver configures a Locker or an Elector, not a Scheduler"},
	} {
		_, err := schedule.New(mem, tc.opts...)
		if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want ErrInvalid containing %q", tc.name, err, tc.want)
		}
	}
	_, err := leasehold.NewLocker(mem, schedule.WithGrace(time.Second))
	if want := "schedule.WithGrace configures a Scheduler, not a Locker or an Elector"; !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Errorf("NewLocker(schedule.WithGrace) = %v, want ErrInvalid containing %q", err, want)
	}
}

// The shared options, defined once in the root package, configure a
// Scheduler as they do a Locker; the deprecated copies in this package still
// work.
func TestSharedOptions(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	shared := []leasehold.Option{
		leasehold.WithInstance("web-1"), leasehold.WithNamespace("prod/billing"),
		leasehold.WithDrift(0.02), leasehold.WithMargin(time.Millisecond), leasehold.WithLogger(slog.Default()),
	}
	s, err := schedule.New(mem, append(shared, schedule.WithGrace(time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	if s.Instance() != "web-1" || s.Namespace() != "prod/billing" {
		t.Fatalf("Scheduler instance %q namespace %q, want web-1 prod/billing", s.Instance(), s.Namespace())
	}
	lk, err := leasehold.NewLocker(mem, append(shared, leasehold.WithTTL(time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	if lk.Instance() != "web-1" || lk.Namespace() != "prod/billing" {
		t.Fatalf("Locker instance %q namespace %q, want web-1 prod/billing", lk.Instance(), lk.Namespace())
	}
	old, err := schedule.New(mem, schedule.WithInstance("web-2"), schedule.WithNamespace("old"), schedule.WithLogger(slog.Default()),
		schedule.WithDrift(0.02), schedule.WithMargin(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if old.Instance() != "web-2" || old.Namespace() != "old" {
		t.Fatalf("Scheduler instance %q namespace %q, want web-2 old", old.Instance(), old.Namespace())
	}
}
