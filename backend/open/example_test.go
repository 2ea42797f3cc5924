package open_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/open"
)

// A program takes the backend from its configuration as a URL; the
// scheduler additionally needs one that keeps a run ledger.
func ExampleOpen() {
	ctx := context.Background()
	b, err := open.Open(ctx, "memory://") // or "redis://127.0.0.1:6379/0", "sqlite:///var/lib/app/locks.db", ...
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	locker, err := leasehold.NewLocker(b, leasehold.WithInstance("web-1"))
	if err != nil {
		fmt.Println(err)
		return
	}
	l, err := locker.Acquire(ctx, "reports/nightly")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Release(ctx)
	_, err = backend.LedgerOf(b)
	fmt.Println(b.Capabilities().Name, "token", l.Token(), "ledger", err == nil)

	// A scheme the table does not know is bad input (the message lists the
	// known ones, open.Schemes()).
	_, err = open.Open(ctx, "consul://127.0.0.1:8500")
	fmt.Println(errors.Is(err, backend.ErrInvalid), strings.Contains(err.Error(), `unknown scheme "consul"`))
	// Output:
	// memory token 1 ledger true
	// true true
}
