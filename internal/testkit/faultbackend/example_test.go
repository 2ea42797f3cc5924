package faultbackend_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
)

// A fault is a middleware on one method: here Renew's reply is lost after
// the real backend applied it, and Acquire is counted. The other methods
// forward to the wrapped backend.
func ExampleBackend() {
	acquires := 0
	fb := &faultbackend.Backend{
		Next: memory.New(),
		OnAcquire: func(ctx context.Context, next faultbackend.AcquireFunc, key string, o backend.Owner, ttl time.Duration) (backend.Grant, error) {
			acquires++
			return next(ctx, key, o, ttl)
		},
		OnRenew: func(ctx context.Context, next faultbackend.RenewFunc, req backend.RenewRequest) (backend.Grant, error) {
			if _, err := next(ctx, req); err != nil {
				return backend.Grant{}, err
			}
			return backend.Grant{}, fmt.Errorf("reply lost: %w", context.DeadlineExceeded)
		},
	}
	ctx := context.Background()
	o := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	g, err := fb.Acquire(ctx, "k", o, time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = fb.Renew(ctx, backend.RenewRequest{Key: "k", Owner: o, Token: g.Token, TTL: time.Minute})
	fmt.Println("renew:", errors.Is(err, context.DeadlineExceeded))
	l, _ := fb.Get(ctx, "k")
	fmt.Println("held by:", l.Owner.Instance, "acquires:", acquires)
	// Output:
	// renew: true
	// held by: a acquires: 1
}
