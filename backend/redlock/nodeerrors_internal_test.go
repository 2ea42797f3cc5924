package redlock

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/backend"
)

// TestNotAppliedOnlyWhenNoNodeWasSent: a Renew or Release whose request
// never left one node's queue, while another node answered (and may have
// applied it), must not say ErrNotApplied; with no node sent, it may.
func TestNotAppliedOnlyWhenNoNodeWasSent(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(backend.ErrLeaseLost)
	notSent := backend.NotSent(ctx)
	cases := []struct {
		name       string
		errs       []error
		notApplied bool
	}{
		{"no node sent", []error{notSent, notSent, notSent}, true},
		{"first node not sent, the others answered", []error{notSent, nil, nil}, false},
		{"first node not sent, another timed out after sending", []error{notSent, context.DeadlineExceeded, notSent}, false},
	}
	for _, c := range cases {
		var e nodeErrors
		for i, err := range c.errs {
			e.add(i, err)
		}
		err := e.err()
		if got := errors.Is(err, backend.ErrNotApplied); got != c.notApplied {
			t.Errorf("%s: %v matches ErrNotApplied = %v, want %v", c.name, err, got, c.notApplied)
		}
		if errors.Is(err, backend.ErrLeaseLost) {
			t.Errorf("%s: %v matches the context's cause ErrLeaseLost", c.name, err)
		}
	}
}
