package conformance

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// checkRefreshCapabilities: a backend whose declaration rests on the
// server's live configuration (backend.CapabilityRefresher) reads it again
// to the declaration it made (the test server was not reconfigured), says
// when, and Capabilities returns that reading from then on. A reading that
// fails (here: its context has ended) withdraws DurableFencing instead of
// leaving a stale true, and the next one that succeeds restores it.
func checkRefreshCapabilities(t T, e *env) {
	b, ctx := e.new(), e.ctx()
	r, ok := b.(backend.CapabilityRefresher)
	if !ok {
		t.Logf("%T implements no backend.CapabilityRefresher: its declaration rests on nothing that changes while it is open", b)
		return
	}
	first := b.Capabilities().ReadAt
	if first.IsZero() {
		t.Errorf("a CapabilityRefresher's declaration has no ReadAt: it does not say when it was read")
	}
	c, err := r.RefreshCapabilities(ctx)
	mustNil(t, err, "RefreshCapabilities")
	if got := b.Capabilities(); got != c {
		t.Errorf("Capabilities() = %+v after RefreshCapabilities returned %+v", got, c)
	}
	if c.ReadAt.Before(first) {
		t.Errorf("RefreshCapabilities: ReadAt %v is before the first reading's %v", c.ReadAt, first)
	}
	if c.ReadAt = (time.Time{}); c != e.h.Want {
		t.Errorf("RefreshCapabilities = %+v, declared %+v (the server was not reconfigured)", c, e.h.Want)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	c, err = r.RefreshCapabilities(ended)
	if err == nil {
		t.Errorf("RefreshCapabilities with an ended context: no error, so nothing was read, yet it declares %+v", c)
	}
	if c.DurableFencing || b.Capabilities().DurableFencing {
		t.Errorf("a refresh that failed (%v) left DurableFencing declared: %+v", err, b.Capabilities())
	}
	c, err = r.RefreshCapabilities(ctx)
	mustNil(t, err, "RefreshCapabilities after a failed one")
	if c.ReadAt = (time.Time{}); c != e.h.Want {
		t.Errorf("RefreshCapabilities after a failed one = %+v, declared %+v", c, e.h.Want)
	}
}
