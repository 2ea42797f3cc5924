package leasehold_test

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend/memory"
)

// An Observer sees every acquire, renewal, loss, release and leadership
// change; package metrics turns them into Prometheus metrics.
func ExampleWithObserver() {
	seen := leasehold.ObserverFunc(func(ev leasehold.Event) {
		fmt.Println(ev.Kind, ev.Key, ev.Result)
	})
	lk, _ := leasehold.NewLocker(memory.New(), leasehold.WithObserver(seen))
	l, _ := lk.TryAcquire(context.Background(), "invoices")
	_, _ = lk.TryAcquire(context.Background(), "invoices")
	_ = l.Release(context.Background())
	// Output:
	// acquire invoices ok
	// acquire invoices held
	// release invoices ok
}
