package guard

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// TestSucceedingCallsFormatNothing: the guard is on every call's path; a
// call that succeeds allocates nothing in it (its error's text is made
// only on failure: an earlier version formatted it on every call, 12 more
// allocations per acquire + release).
func TestSucceedingCallsFormatNothing(t *testing.T) {
	g := &Guard{Name: "test", MinTTL: time.Millisecond, Closed: func() error { return nil }}
	ctx := context.Background()
	o := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	grant := func(context.Context, string, backend.Owner, time.Duration) (backend.Grant, error) {
		return backend.Grant{Token: 1, TTL: time.Second}, nil
	}
	calls := map[string]func(){
		"Acquire": func() { _, _ = g.Acquire(ctx, "k", o, time.Second, grant) },
		"Renew": func() {
			_, _ = g.Renew(ctx, backend.RenewRequest{Key: "k", Owner: o, Token: 1, TTL: time.Second},
				func(context.Context, backend.RenewRequest) (backend.Grant, error) {
					return backend.Grant{Token: 1}, nil
				})
		},
		"Release": func() {
			_ = g.Release(ctx, "k", o, 1, func(context.Context, string, backend.Owner, uint64) error { return nil })
		},
		"Heartbeat": func() {
			_ = g.Heartbeat(ctx, backend.HeartbeatRequest{Job: "j", ScheduledAt: at, Owner: o, Token: 1, TTL: time.Second},
				func(context.Context, backend.HeartbeatRequest) error { return nil })
		},
	}
	for name, call := range calls {
		if n := testing.AllocsPerRun(100, call); n != 0 {
			t.Errorf("%s that succeeds: %v allocations in the guard, want 0", name, n)
		}
	}
}

// TestFailNamesFailuresAndPassesAnswers: a bare ErrLeaseLost or
// ErrNotFound is given what it is about; an answer passes as it is; a
// failure, or an error that only matches ErrClosed (closed while the call
// ran), is named "<Name>: <call>".
func TestFailNamesFailuresAndPassesAnswers(t *testing.T) {
	g := &Guard{Name: "test"}
	key := call{op: "renew", subject: "key", name: "k", token: 3}
	occ := call{op: "finish", subject: "job", name: "j", at: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), token: 7}
	held := &backend.HeldError{}
	closedMidCall := fmt.Errorf("sent, then %w", backend.ErrClosed)
	for _, c := range []struct {
		err  error
		c    call
		want string
		is   error
	}{
		{backend.ErrLeaseLost, key, `leasehold/backend: lease lost: key "k", token 3`, backend.ErrLeaseLost},
		{backend.ErrLeaseLost, occ, `leasehold/backend: lease lost: job "j" at 2030-01-02T03:04:05Z, token 7`, backend.ErrLeaseLost},
		{backend.ErrNotFound, call{op: "get", subject: "key", name: "k"}, `leasehold/backend: not found: key "k"`, backend.ErrNotFound},
		{held, key, held.Error(), backend.ErrLeaseHeld},
		{backend.ErrClosed, key, backend.ErrClosed.Error(), backend.ErrClosed},
		{closedMidCall, key, `test: renew key "k", token 3: sent, then leasehold/backend: closed`, backend.ErrClosed},
		{context.DeadlineExceeded, call{op: "list"}, `test: list runs: context deadline exceeded`, context.DeadlineExceeded},
	} {
		got := g.fail(c.err, c.c)
		if got.Error() != c.want || !errors.Is(got, c.is) {
			t.Errorf("fail(%v, %+v) = %q, want %q matching %v", c.err, c.c, got, c.want, c.is)
		}
	}
	if g.fail(nil, key) != nil {
		t.Error("fail(nil) is not nil")
	}
}
