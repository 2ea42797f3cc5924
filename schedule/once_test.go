package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/schedule"
)

// onceBackends opens each backend with a ledger that Once is tested on.
func onceBackends(t *testing.T) map[string]func(t *testing.T) backend.Backend {
	return map[string]func(t *testing.T) backend.Backend{
		"memory": func(t *testing.T) backend.Backend { return memory.New() },
		"sqlite": func(t *testing.T) backend.Backend {
			b, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "once.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			return b
		},
		"postgres": func(t *testing.T) backend.Backend {
			prefix := "once" + backend.NewNonce().String()[:8] + "_"
			b, err := postgres.Open(context.Background(), testserver.PostgresURL(t), postgres.WithTablePrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			return b
		},
	}
}

func TestOnceRunsEachKeyOnce(t *testing.T) {
	for name, open := range onceBackends(t) {
		t.Run(name, func(t *testing.T) {
			b := open(t)
			ctx := context.Background()
			// Eight consumers are handed the same message at once.
			var ran atomic.Int32
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Go(func() {
					errs[i] = schedule.RunOnce(ctx, b, "notify/order-42", func(ctx context.Context, tok leasehold.Token) error {
						if tok == 0 {
							t.Errorf("fencing token is 0")
						}
						ran.Add(1)
						return nil
					}, schedule.OnceOptions{Claim: schedule.ClaimOptions{Instance: fmt.Sprint("consumer-", i)}})
				})
			}
			wg.Wait()
			if n := ran.Load(); n != 1 {
				t.Fatalf("the key ran %d times, want 1 (errors %v)", n, errs)
			}
			won := 0
			for _, err := range errs {
				var ce *backend.ClaimedError
				switch {
				case err == nil:
					won++
				case errors.As(err, &ce):
				default:
					t.Fatalf("Once = %v, want nil or a ClaimedError", err)
				}
			}
			if won != 1 {
				t.Fatalf("%d calls reported running the key", won)
			}
			// A redelivery after it is done: the claim error says done.
			err := schedule.RunOnce(ctx, b, "notify/order-42", func(context.Context, leasehold.Token) error {
				t.Error("ran a done key again")
				return nil
			}, schedule.OnceOptions{})
			var ce *backend.ClaimedError
			if !errors.As(err, &ce) || ce.Run.State != backend.Succeeded {
				t.Fatalf("Once on a done key = %v, want a ClaimedError in state succeeded", err)
			}
			// Another namespace is another key space.
			if err := schedule.RunOnce(ctx, b, "notify/order-42", func(context.Context, leasehold.Token) error { return nil },
				schedule.OnceOptions{Namespace: "billing"}); err != nil {
				t.Fatalf("Once in namespace billing = %v, want it to run", err)
			}
		})
	}
}

func TestOnceFailureIsRecordedAndNotRetried(t *testing.T) {
	for name, open := range onceBackends(t) {
		t.Run(name, func(t *testing.T) {
			b := open(t)
			ctx := context.Background()
			boom := errors.New("smtp 554")
			err := schedule.RunOnce(ctx, b, "mail-7", func(context.Context, leasehold.Token) error { return boom }, schedule.OnceOptions{})
			if !errors.Is(err, schedule.ErrOnceFailed) || !errors.Is(err, boom) {
				t.Fatalf("Once with a failing fn = %v, want ErrOnceFailed wrapping its error", err)
			}
			err = schedule.RunOnce(ctx, b, "mail-7", func(context.Context, leasehold.Token) error { return nil }, schedule.OnceOptions{})
			var ce *backend.ClaimedError
			if !errors.As(err, &ce) || ce.Run.State != backend.Failed || ce.Run.Error != boom.Error() {
				t.Fatalf("Once after a failure = %v, want a ClaimedError with the recorded failure", err)
			}
		})
	}
}

// After the retention window (a Prune of the key's finished run), the key
// may run again: "once" holds for as long as the ledger keeps the run.
func TestOnceAgainAfterPrune(t *testing.T) {
	for name, open := range onceBackends(t) {
		t.Run(name, func(t *testing.T) {
			b := open(t)
			ctx := context.Background()
			n := 0
			run := func() error {
				return schedule.RunOnce(ctx, b, "k", func(context.Context, leasehold.Token) error { n++; return nil }, schedule.OnceOptions{})
			}
			if err := run(); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Prune(ctx, time.Now().Add(time.Hour), 100); err != nil {
				t.Fatal(err)
			}
			if err := run(); err != nil || n != 2 {
				t.Fatalf("Once after the prune = %v (ran %d times), want it to run again", err, n)
			}
		})
	}
}

func TestOnceRefusesBadKey(t *testing.T) {
	err := schedule.RunOnce(context.Background(), memory.New(), "bad\x00key", func(context.Context, leasehold.Token) error { return nil }, schedule.OnceOptions{})
	if !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("RunOnce(%q) = %v, want ErrInvalid", "bad\x00key", err)
	}
}

func ExampleRunOnce() {
	b := memory.New() // in production: a backend the consumers share
	deliver := func(msgID string) error {
		return schedule.RunOnce(context.Background(), b, "welcome-mail/"+msgID, func(ctx context.Context, token leasehold.Token) error {
			fmt.Println("sending the welcome mail for", msgID)
			return nil
		}, schedule.OnceOptions{Claim: schedule.ClaimOptions{Instance: "consumer-1"}})
	}
	fmt.Println(deliver("user-7"))
	err := deliver("user-7") // the queue redelivers it
	fmt.Println("redelivery skipped:", errors.Is(err, backend.ErrOccurrenceClaimed))
	// Output:
	// sending the welcome mail for user-7
	// <nil>
	// redelivery skipped: true
}

// TestOnceAbandonsAKeyWhoseHolderDied: a consumer claimed the key and died
// mid-way (its lease expires, nobody heartbeats it). The next RunOnce does
// not report "claimed, running" for ever (no sweep recovers a once key):
// it abandons the dead run and says so (maybe done; fn does not run), and
// later calls see the abandoned record.
func TestOnceAbandonsAKeyWhoseHolderDied(t *testing.T) {
	for name, open := range onceBackends(t) {
		t.Run(name, func(t *testing.T) {
			b := open(t)
			ctx := context.Background()
			l := b.(backend.Ledger)
			// Claim the key as RunOnce does, with a short lease nobody keeps.
			g, err := schedule.NamespaceLedger(l, leasehold.DefaultNamespace).Claim(ctx, backend.ClaimRequest{
				Job: schedule.OncePrefix + "dead", ScheduledAt: time.Unix(0, 0).UTC(),
				Owner: backend.Owner{Instance: "died", Nonce: backend.NewNonce()}, TTL: 50 * time.Millisecond,
				MaxEarly: time.Second,
			})
			if err != nil {
				t.Fatalf("claim by the consumer that dies: %v", err)
			}
			ran := false
			eventually.Within(30*time.Second, func() bool { // claimed until the lease (50 ms by the backend's clock) runs out
				err = schedule.RunOnce(ctx, b, "dead", func(context.Context, leasehold.Token) error { ran = true; return nil }, schedule.OnceOptions{})
				return !errors.Is(err, backend.ErrOccurrenceClaimed)
			})
			if !errors.Is(err, schedule.ErrOnceAbandoned) {
				t.Fatalf("RunOnce after the holder (token %d) died: %v; want ErrOnceAbandoned", g.Token, err)
			}
			if ran {
				t.Fatal("fn ran for a key whose first run may have done its work")
			}
			var ce *backend.ClaimedError
			if err := schedule.RunOnce(ctx, b, "dead", func(context.Context, leasehold.Token) error { ran = true; return nil }, schedule.OnceOptions{}); !errors.As(err, &ce) || ce.Run.State != backend.Abandoned || ran {
				t.Fatalf("RunOnce after the abandon: %v (ran %v); want the abandoned record", err, ran)
			}
		})
	}
}

func TestOnceRefusesMaxLate(t *testing.T) {
	err := schedule.RunOnce(context.Background(), memory.New(), "k", func(context.Context, leasehold.Token) error { return nil },
		schedule.OnceOptions{Claim: schedule.ClaimOptions{MaxLate: time.Minute}})
	if !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("RunOnce with Claim.MaxLate: %v; want ErrInvalid (a key has no instant to be late for)", err)
	}
}
