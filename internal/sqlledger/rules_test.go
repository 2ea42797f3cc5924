package sqlledger

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

func TestBind(t *testing.T) {
	q := `UPDATE t SET a = ? WHERE b = ? AND c > ?`
	if got := (&Dialect{}).Bind(q); got != q {
		t.Errorf("Bind with ? placeholders = %q, want it unchanged", got)
	}
	want := `UPDATE t SET a = $1 WHERE b = $2 AND c > $3`
	if got := (&Dialect{Numbered: true}).Bind(q); got != want {
		t.Errorf("Bind numbered = %q, want %q", got, want)
	}
}

// TestReclaimOrder: each verdict is reached only when the ones before it
// do not apply, in the order the ledger's contract states.
func TestReclaimOrder(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	me := backend.Owner{Instance: "me", Nonce: backend.NewNonce()}
	other := backend.Owner{Instance: "other", Nonce: backend.NewNonce()}
	req := backend.ClaimRequest{Job: "j", ScheduledAt: at, Owner: me, TTL: time.Second, MaxAttempts: 2}
	for _, c := range []struct {
		name  string
		r     backend.Run
		live  bool
		renew bool
		want  error
	}{
		{"own running, even live", backend.Run{State: backend.Running, Owner: me, Attempt: 5}, true, true, nil},
		{"finished beats live", backend.Run{State: backend.Succeeded, Owner: other}, true, false, backend.ErrOccurrenceClaimed},
		{"live beats exhausted", backend.Run{State: backend.Running, Owner: other, Attempt: 5}, true, false, backend.ErrLeaseNotExpired},
		{"exhausted", backend.Run{State: backend.Running, Owner: other, Attempt: 2}, false, false, backend.ErrOccurrenceExhausted},
		{"take over", backend.Run{State: backend.Running, Owner: other, Attempt: 1}, false, false, nil},
	} {
		renew, err := Reclaim(req, at, c.r, c.live)
		if renew != c.renew || !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: Reclaim = %v, %v; want %v, %v", c.name, renew, err, c.renew, c.want)
		}
	}
}

func TestWindowOrder(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	req := backend.ClaimRequest{Job: "j", MaxEarly: time.Second, MaxLate: time.Minute}
	for _, c := range []struct {
		at   time.Time
		want error
	}{
		{now.Add(2 * time.Second), backend.ErrOccurrenceTooEarly},
		{now.Add(time.Second), nil},
		{now.Add(-time.Minute), nil},
		{now.Add(-time.Minute - time.Millisecond), backend.ErrOccurrenceTooLate},
	} {
		if err := Window(req, c.at, now); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("Window(at %v) = %v, want %v", c.at.Sub(now), err, c.want)
		}
	}
	req.MaxLate = 0 // no bound
	if err := Window(req, now.Add(-time.Hour), now); err != nil {
		t.Errorf("Window without MaxLate, an hour late = %v, want nil", err)
	}
}

func TestVerdict(t *testing.T) {
	for _, err := range []error{
		&backend.ClaimedError{}, NeverClaimed("j", time.Unix(0, 0)), NotExpired("j", time.Unix(0, 0), backend.Run{}),
		Overlap(backend.ClaimRequest{}, 1), fmt.Errorf("wrapped: %w", backend.ErrOccurrenceTooLate),
	} {
		if !Verdict(err) {
			t.Errorf("Verdict(%v) = false, want true", err)
		}
	}
	for _, err := range []error{errors.New("connection reset"), backend.ErrLeaseLost, backend.ErrClosed} {
		if Verdict(err) {
			t.Errorf("Verdict(%v) = true, want false", err)
		}
	}
}
