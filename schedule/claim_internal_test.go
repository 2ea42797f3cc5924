package schedule

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

// lateClaim stages issue #14 item 1 for claims: attempt 1 fails at once
// without reaching the ledger (a broken connection) and is applied late,
// while attempt 2 — refused as too early — is on its way back; attempt 3
// then answers "yours" with attempt 1's grant. Heartbeats and Finish fail
// without reaching the ledger once drop is set, so the lease must expire.
type lateClaim struct {
	backend.Backend
	delay time.Duration

	mu    sync.Mutex
	n     int
	first backend.ClaimRequest
	drop  bool
}

func (b *lateClaim) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	if req.Job != "late" { // the schedule version's record
		return b.Backend.Claim(ctx, req)
	}
	b.mu.Lock()
	b.n++
	n := b.n
	if n == 1 {
		b.first = req
	}
	first := b.first
	b.mu.Unlock()
	switch n {
	case 1:
		return backend.Grant{}, errors.New("injected: connection reset")
	case 2:
		if _, err := b.Backend.Claim(context.Background(), first); err != nil {
			return backend.Grant{}, fmt.Errorf("applying attempt 1 late: %w", err)
		}
		time.Sleep(b.delay) // the scenario: the refusal arrives late
		return backend.Grant{}, fmt.Errorf("injected: %w", backend.ErrOccurrenceTooEarly)
	}
	return b.Backend.Claim(ctx, req)
}

func (b *lateClaim) dropped() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.drop
}

func (b *lateClaim) Finish(ctx context.Context, req backend.FinishRequest) error {
	if b.dropped() {
		return errors.New("injected: finish lost")
	}
	return b.Backend.Finish(ctx, req)
}

func (b *lateClaim) Heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	if b.dropped() {
		return errors.New("injected: heartbeat lost")
	}
	return b.Backend.Heartbeat(ctx, req)
}

// TestLateAppliedClaimNeverOutlivesLease: the runner's context must be
// done before another instance can reclaim the occurrence, when an
// attempt refused as too early hid an earlier one that was applied late.
func TestLateAppliedClaimNeverOutlivesLease(t *testing.T) {
	const ttl = time.Second
	mem := memory.New()
	defer mem.Close()
	lb := &lateClaim{Backend: mem, delay: ttl * 7 / 10}
	s, err := New(lb, WithInstance("a"))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan context.Context, 1)
	done := make(chan struct{})
	err = s.Register(Job{Name: "late", Schedule: "0 0 1 1 *", LeaseTTL: ttl, Crash: CrashRetry,
		Func: func(ctx context.Context, r Run) error {
			started <- ctx
			<-ctx.Done()
			close(done)
			return ctx.Err()
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(ctx)
	at := backend.Instant(time.Now())
	go s.occur(s.loopCtx, s.jobs["late"], at)

	var jobCtx context.Context
	select {
	case jobCtx = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the occurrence never ran")
	}
	lb.mu.Lock()
	lb.drop = true
	lb.mu.Unlock()
	other := backend.Owner{Instance: "b", Nonce: backend.NewNonce()}
	deadline := time.Now().Add(20 * ttl)
	for {
		g, _, err := mem.Reclaim(ctx, backend.ClaimRequest{Job: "late", ScheduledAt: at, Owner: other, TTL: ttl})
		if err == nil {
			if jobCtx.Err() == nil {
				t.Fatalf("another instance reclaimed the occurrence (token %d) while the first runner's context was live: its deadline outlived the ledger's lease", g.Token)
			}
			<-done
			return
		}
		if !errors.Is(err, backend.ErrLeaseNotExpired) {
			t.Fatalf("Reclaim: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runner's lease never expired after its heartbeats stopped")
		}
		time.Sleep(2 * time.Millisecond)
	}
}
