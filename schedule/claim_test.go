package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
	"github.com/leasehold/leasehold/schedule"
)

// unknownThenEarly loses attempt 1 of a Claim (a broken connection: its
// outcome is unknown to the caller), refuses attempt 2 as too early, and
// then delivers attempt 1 late, as the network may, when applyFirst is
// called.
func unknownThenEarly(b backend.Backend) (fb *faultbackend.Backend, applyFirst func(ctx context.Context) error) {
	var (
		mu    sync.Mutex
		n     int
		first backend.ClaimRequest
	)
	fb = &faultbackend.Backend{Next: b,
		OnClaim: func(ctx context.Context, next faultbackend.ClaimFunc, req backend.ClaimRequest) (backend.Grant, error) {
			mu.Lock()
			n++
			n := n
			if n == 1 {
				first = req
			}
			mu.Unlock()
			switch n {
			case 1:
				return backend.Grant{}, errors.New("injected: connection reset")
			case 2:
				return backend.Grant{}, fmt.Errorf("injected: %w", backend.ErrOccurrenceTooEarly)
			}
			return next(ctx, req)
		}}
	applyFirst = func(ctx context.Context) error {
		mu.Lock()
		req := first
		mu.Unlock()
		_, err := b.Claim(ctx, req)
		return err
	}
	return fb, applyFirst
}

// TestClaimOccurrenceUnknownThenTooEarly: a ClaimOccurrence whose first
// attempt's outcome is unknown must not report a later "too early" refusal
// as the answer: the first attempt may still be applied (here it is), and
// the caller, told "too early", leaves a running claim nobody runs. The
// contract: an outcome that cannot be known is ErrIndeterminate.
func TestClaimOccurrenceUnknownThenTooEarly(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	b, applyFirst := unknownThenEarly(mem)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	at := time.Now().Add(-time.Second)
	_, err := schedule.ClaimOccurrence(ctx, b, "job", at, schedule.ClaimOptions{Instance: "a", TTL: time.Second})
	if err == nil {
		t.Fatal("ClaimOccurrence succeeded; the wrapper refuses attempt 2")
	}
	if err := applyFirst(ctx); err != nil {
		t.Fatalf("applying attempt 1 late: %v", err)
	}
	if !errors.Is(err, leasehold.ErrOutcomeIndeterminate) {
		r, _ := mem.GetRun(ctx, "job", backend.Instant(at))
		t.Fatalf("ClaimOccurrence = %v, want ErrIndeterminate: an earlier attempt's outcome was unknown, and it was applied (run state %s, owner %s)",
			err, r.State, r.Owner.Instance)
	}
}

// slowUnknownFirst: attempt 1 of a Claim takes span and then fails with an
// unknown outcome (nothing applied); later attempts go through. Heartbeat
// honours ctx as networked ledgers do.
func slowUnknownFirst(b backend.Backend, span time.Duration) *faultbackend.Backend {
	var n atomic.Int64
	return &faultbackend.Backend{
		Next: b,
		OnClaim: func(ctx context.Context, next faultbackend.ClaimFunc, req backend.ClaimRequest) (backend.Grant, error) {
			if n.Add(1) == 1 {
				time.Sleep(span) // a request timing out
				return backend.Grant{}, errors.New("injected: i/o timeout")
			}
			return next(ctx, req)
		},
		OnHeartbeat: func(ctx context.Context, next faultbackend.HeartbeatFunc, req backend.HeartbeatRequest) error {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("%w: %w", backend.ErrNotApplied, err)
			}
			return next(ctx, req)
		},
	}
}

// TestClaimOccurrenceAfterSlowUnknownAttemptIsLive: when the first attempt
// timed out after longer than the TTL and the retry won the claim, the
// Claim's context must be live (confirmed by a heartbeat), not cancelled at
// once because its deadline counts from the first attempt's send time.
//
// It runs in a synctest bubble: the first attempt's 600 ms (twice the
// lease) and the 900 ms the claim must stay live are virtual time.
func TestClaimOccurrenceAfterSlowUnknownAttemptIsLive(t *testing.T) {
	synctest.Test(t, claimOccurrenceAfterSlowUnknownAttemptIsLive)
}

// claimOccurrenceAfterSlowUnknownAttemptIsLive is TestClaimOccurrenceAfterSlowUnknownAttemptIsLive
// inside its bubble.
func claimOccurrenceAfterSlowUnknownAttemptIsLive(t *testing.T) {
	const ttl = 300 * time.Millisecond
	mem := memory.New()
	defer mem.Close()
	b := slowUnknownFirst(mem, 2*ttl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := schedule.ClaimOccurrence(ctx, b, "job", time.Now().Add(-time.Second), schedule.ClaimOptions{Instance: "a", TTL: ttl})
	if err != nil {
		t.Fatalf("ClaimOccurrence: %v", err)
	}
	defer c.Finish(context.Background(), nil)
	select {
	case <-c.Context().Done():
		t.Fatalf("the won claim's context was cancelled (%v): its deadline counted from the attempt that timed out", context.Cause(c.Context()))
	case <-time.After(3 * ttl): // heartbeats keep a live claim going
	}
}

// A job name with backend.MetaSep is the scheduler's metadata space: a
// ClaimOccurrence under such a name would make a run that no listing
// without a job shows (and "<job>!pause!<ns>" is a scheduler's pause
// record). It is refused, naming the value, and nothing is claimed.
func TestClaimOccurrenceRefusesReservedJobName(t *testing.T) {
	ctx := context.Background()
	b := memory.New()
	at := time.Now().Add(-time.Second)
	for _, name := range []string{"reports!daily", "nightly!pause!default", "gocron/a!b"} {
		c, err := schedule.ClaimOccurrence(ctx, b, name, at, schedule.ClaimOptions{Instance: "a"})
		if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), name) {
			if c != nil {
				_ = c.Finish(ctx, nil)
			}
			t.Fatalf("ClaimOccurrence(%q) = %v; want ErrInvalid naming the job", name, err)
		}
		if _, err := b.GetRun(ctx, name, at); !errors.Is(err, backend.ErrNotFound) {
			t.Fatalf("GetRun(%q) after a refused claim: %v; want ErrNotFound", name, err)
		}
	}
	// A name without it is claimed and listed.
	c, err := schedule.ClaimOccurrence(ctx, b, "reports/daily", at, schedule.ClaimOptions{Instance: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	runs, err := b.ListRuns(ctx, backend.RunFilter{})
	if err != nil || len(runs) != 1 || runs[0].Job != "reports/daily" {
		t.Fatalf("ListRuns = %+v, %v; want the one run of reports/daily", runs, err)
	}
}
