package leasehold_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend/memory"
)

// TestAcquireAtDeadlineIsNotAcquired: an Acquire whose context ends while
// another instance holds the key fails with ErrNotAcquired (and the
// context's error), naming the key and the holder; nothing is
// indeterminate, since every request was answered.
func TestAcquireAtDeadlineIsNotAcquired(t *testing.T) {
	b := memory.New()
	holder, err := leasehold.NewLocker(b, leasehold.WithInstance("holder-a"))
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := leasehold.NewLocker(b, leasehold.WithInstance("waiter-b"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := holder.TryAcquire(context.Background(), "jobs/x")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = waiter.Acquire(ctx, "jobs/x")
	if !errors.Is(err, leasehold.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, leasehold.ErrIndeterminate) {
		t.Fatalf("Acquire at its deadline: %v, want ErrNotAcquired wrapping DeadlineExceeded", err)
	}
	want := `acquire "jobs/x": held by holder-a (token ` + l.Token().String() + `)`
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("Acquire at its deadline: %q, want it to contain %q", err, want)
	}
}
