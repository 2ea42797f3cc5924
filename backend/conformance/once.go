package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/schedule"
)

// onceChecks check schedule.RunOnce, the once-per-key helper over the
// ledger, on the backend under test. They need a ledger.
func onceChecks() []check {
	return []check{
		{"OnceRunsEachKeyOnceAcrossInstances", checkOnceEachKey},
	}
}

func checkOnceEachKey(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	// Six consumers are handed one message at once.
	var ran atomic.Int32
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			errs[i] = schedule.RunOnce(ctx, b, "notify/m-1", func(context.Context, leasehold.Token) error {
				ran.Add(1)
				return nil
			}, schedule.OnceOptions{Claim: schedule.ClaimOptions{Instance: fmt.Sprint("c", i), TTL: e.libTTL()}})
		})
	}
	wg.Wait()
	if n := ran.Load(); n != 1 {
		t.Fatalf("RunOnce: the key ran %d times among 6 concurrent calls (errors %v)", n, errs)
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, backend.ErrOccurrenceClaimed) {
			t.Fatalf("RunOnce = %v, want nil or ErrClaimed", err)
		}
	}
	var ce *backend.ClaimedError
	err := schedule.RunOnce(ctx, b, "notify/m-1", func(context.Context, leasehold.Token) error {
		t.Errorf("RunOnce ran a done key again")
		return nil
	}, schedule.OnceOptions{Claim: schedule.ClaimOptions{TTL: e.libTTL()}})
	if !errors.As(err, &ce) || ce.Run.State != backend.Succeeded {
		t.Fatalf("RunOnce on a done key = %v, want a ClaimedError in state succeeded", err)
	}
	// A failure is the key's one run, recorded as failed.
	boom := errors.New("smtp 554")
	err = schedule.RunOnce(ctx, b, "notify/m-2", func(context.Context, leasehold.Token) error { return boom },
		schedule.OnceOptions{Claim: schedule.ClaimOptions{TTL: e.libTTL()}})
	if !errors.Is(err, schedule.ErrOnceFailed) || !errors.Is(err, boom) {
		t.Fatalf("RunOnce with a failing function = %v, want ErrOnceFailed wrapping its error", err)
	}
	err = schedule.RunOnce(ctx, b, "notify/m-2", func(context.Context, leasehold.Token) error { return nil },
		schedule.OnceOptions{Claim: schedule.ClaimOptions{TTL: e.libTTL()}})
	if !errors.As(err, &ce) || ce.Run.State != backend.Failed {
		t.Fatalf("RunOnce after a failure = %v, want a ClaimedError in state failed", err)
	}
}
