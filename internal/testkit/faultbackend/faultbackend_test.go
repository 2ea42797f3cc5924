package faultbackend_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
)

// TestHidesOptionalInterfaces: like a struct embedding backend.Backend,
// the fault backend offers Leases and Ledger only, whatever it wraps
// (memory is a Notifier).
func TestHidesOptionalInterfaces(t *testing.T) {
	mem := memory.New()
	if _, ok := backend.Leases(mem).(backend.Notifier); !ok {
		t.Fatal("memory is no longer a Notifier: this test checks nothing")
	}
	var l backend.Leases = &faultbackend.Backend{Next: mem}
	if _, ok := l.(backend.Notifier); ok {
		t.Error("the fault backend is a Notifier")
	}
	if _, ok := l.(backend.Queue); ok {
		t.Error("the fault backend is a Queue")
	}
	if _, ok := l.(backend.ServerClock); ok {
		t.Error("the fault backend is a ServerClock")
	}
	if _, err := backend.LedgerOf(l); err != nil {
		t.Errorf("LedgerOf: %v", err)
	}
}

// TestOnCallAnswersEveryCall: an error from OnCall is the answer of every
// call but Capabilities and Close, named by its method, and the call
// reaches neither its middleware nor the wrapped backend; nil lets the call
// go on.
func TestOnCallAnswersEveryCall(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	defer mem.Close()
	down := errors.New("down")
	var (
		mu     sync.Mutex
		failed bool
		seen   []string
	)
	fb := &faultbackend.Backend{
		Next: mem,
		OnCall: func(_ context.Context, method string) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, method)
			if failed {
				return fmt.Errorf("%s: %w", method, down)
			}
			return nil
		},
		OnAcquire: func(context.Context, faultbackend.AcquireFunc, string, backend.Owner, time.Duration) (backend.Grant, error) {
			t.Error("OnAcquire ran after OnCall failed the call")
			return backend.Grant{}, nil
		},
	}
	o := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	at := backend.Instant(time.Now().Add(-time.Second))
	claim := backend.ClaimRequest{Job: "j", ScheduledAt: at, Owner: o, TTL: time.Minute}
	calls := []struct {
		method string
		call   func() error
	}{
		{"Acquire", func() error { _, err := fb.Acquire(ctx, "k", o, time.Minute); return err }},
		{"Renew", func() error {
			_, err := fb.Renew(ctx, backend.RenewRequest{Key: "k2", Owner: o, Token: 1, TTL: time.Minute})
			return err
		}},
		{"Release", func() error { return fb.Release(ctx, "k2", o, 1) }},
		{"Get", func() error { _, err := fb.Get(ctx, "k2"); return err }},
		{"List", func() error { _, err := fb.List(ctx, "", 10); return err }},
		{"Claim", func() error { _, err := fb.Claim(ctx, claim); return err }},
		{"Heartbeat", func() error {
			return fb.Heartbeat(ctx, backend.HeartbeatRequest{Job: "j2", ScheduledAt: at, Owner: o, Token: 1, TTL: time.Minute})
		}},
		{"Finish", func() error {
			return fb.Finish(ctx, backend.FinishRequest{Job: "j2", ScheduledAt: at, Owner: o, Token: 1, Outcome: backend.Outcome{State: backend.Succeeded}})
		}},
		{"Reclaim", func() error { _, _, err := fb.Reclaim(ctx, claim); return err }},
		{"Abandon", func() error { _, err := fb.Abandon(ctx, "j2", at); return err }},
		{"GetRun", func() error { _, err := fb.GetRun(ctx, "j", at); return err }},
		{"HighWater", func() error { _, _, err := fb.HighWater(ctx, "j"); return err }},
		{"ListRuns", func() error { _, err := fb.ListRuns(ctx, backend.RunFilter{Job: "j"}); return err }},
		{"Prune", func() error { _, err := fb.Prune(ctx, time.Now(), 10); return err }},
	}
	failed = true
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, down) || !strings.HasPrefix(err.Error(), c.method+":") {
			t.Errorf("%s with OnCall failing: %v, want OnCall's error for %s", c.method, err, c.method)
		}
	}
	if len(seen) != len(calls) {
		t.Errorf("OnCall ran %d times for %d calls: %v", len(seen), len(calls), seen)
	}
	if _, err := mem.Get(ctx, "k"); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("the failed Acquire reached the backend: Get = %v", err)
	}
	if _, err := mem.GetRun(ctx, "j", at); err == nil {
		t.Error("the failed Claim reached the backend")
	}
	before := len(seen)
	_ = fb.Capabilities()
	if len(seen) != before {
		t.Errorf("OnCall ran for Capabilities")
	}
	// nil lets the call go on (to its middleware, here forwarding).
	failed = false
	fb.OnAcquire = nil
	if _, err := fb.Claim(ctx, claim); err != nil {
		t.Fatalf("Claim with OnCall answering nil: %v", err)
	}
	if _, err := mem.GetRun(ctx, "j", at); err != nil {
		t.Errorf("the Claim OnCall let through did not reach the backend: %v", err)
	}
}
