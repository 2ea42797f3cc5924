package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestTokensGoBackAfterAppendonlyOff is the anomaly a stale DurableFencing
// hides: a server opened with appendonly yes + appendfsync always, then
// CONFIG SET appendonly no, stops writing grants to disk; killed (-9) and
// started again on the same directory it loads the old append-only file,
// and the key's tokens go back. The declaration re-read after the CONFIG
// SET says so.
func TestTokensGoBackAfterAppendonlyOff(t *testing.T) {
	srv := testserver.Redis(t, "--appendonly", "yes", "--appendfsync", "always")
	ctx := context.Background()
	b := open(t, srv.Addr())
	if !b.Capabilities().DurableFencing {
		t.Fatalf("appendonly yes, appendfsync always: %+v, want DurableFencing", b.Capabilities())
	}
	grant := func() uint64 {
		t.Helper()
		o := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
		g, err := b.Acquire(ctx, "k", o, time.Minute)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		if err := b.Release(ctx, "k", o, g.Token); err != nil {
			t.Fatalf("Release: %v", err)
		}
		return g.Token
	}
	for range 6 {
		grant()
	}
	if err := client(t, srv.Addr()).ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		t.Fatal(err)
	}
	readAt := b.Capabilities().ReadAt
	c, err := b.RefreshCapabilities(ctx)
	if err != nil {
		t.Fatalf("RefreshCapabilities: %v", err)
	}
	if c.DurableFencing || !c.SafeFencing || !c.ReadAt.After(readAt) {
		t.Errorf("after CONFIG SET appendonly no: %+v (New read at %v), want SafeFencing but not DurableFencing, read again", c, readAt)
	}
	if got := b.Capabilities(); got != c {
		t.Errorf("Capabilities() = %+v after RefreshCapabilities returned %+v", got, c)
	}
	var before uint64
	for before < 25 {
		before = grant()
	}
	srv.Kill()
	srv.Start()
	var after uint64
	eventually.True(t, 20*time.Second, "a grant after the restart", func() bool {
		var err error
		after, err = grantOnce(ctx, b)
		return err == nil
	})
	if after > before {
		t.Fatalf("token %d after the crash, %d before: the anomaly DurableFencing=false predicts did not happen", after, before)
	}
	t.Logf("appendonly turned off at token 6; token %d before kill -9, %d after the restart", before, after)
}

// grantOnce acquires and releases "k" once and returns the token.
func grantOnce(ctx context.Context, b backend.Leases) (uint64, error) {
	o := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	g, err := b.Acquire(ctx, "k", o, time.Minute)
	if err != nil {
		return 0, err
	}
	return g.Token, b.Release(ctx, "k", o, g.Token)
}

// TestFailedRefreshWithdrawsGuarantees: a refresh that cannot read the
// server's configuration (here: the server is gone) returns an error and
// leaves no stale "true" behind: the declaration falls back to what
// needs no reading, SafeFencing and DurableFencing false.
func TestFailedRefreshWithdrawsGuarantees(t *testing.T) {
	srv := testserver.Redis(t, "--appendonly", "yes", "--appendfsync", "always")
	b := open(t, srv.Addr())
	if c := b.Capabilities(); !c.DurableFencing {
		t.Fatalf("appendonly yes, appendfsync always: %+v, want DurableFencing", c)
	}
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.Refresh(ctx); err == nil {
		t.Fatal("Refresh with the server killed: no error")
	}
	if c := b.Capabilities(); c.SafeFencing || c.DurableFencing {
		t.Errorf("after a failed Refresh: %+v, want SafeFencing and DurableFencing false (unknown is not a guarantee)", c)
	}
}

// TestRefusedConfigIsUnknown: a user whose ACL refuses CONFIG GET, or INFO
// too (a tenant's recipe need not grant them), can open the backend; what
// the refused commands would decide is declared false, and Explain names
// the refusal. A refresh gives the same answer, not an error.
func TestRefusedConfigIsUnknown(t *testing.T) {
	srv := testserver.Redis(t, "--appendonly", "yes", "--appendfsync", "always")
	ctx := context.Background()
	for user, rules := range map[string][]any{"noconfig": {"-config"}, "noinfo": {"-config", "-info"}} {
		b := openAs(t, srv.Addr(), user, rules...)
		c, err := b.RefreshCapabilities(ctx)
		if err != nil {
			t.Fatalf("%s: RefreshCapabilities: %v", user, err)
		}
		if c.SafeFencing || c.DurableFencing || c.ReadAt.IsZero() {
			t.Errorf("%s: %+v, want SafeFencing and DurableFencing false, with the time they were read", user, c)
		}
		rs, err := b.Explain(ctx)
		if err != nil {
			t.Fatalf("%s: Explain: %v", user, err)
		}
		for _, r := range rs {
			if !strings.Contains(r.Why, "could not read") || !strings.Contains(r.Why, "NOPERM") {
				t.Errorf("%s: %s reason %q does not say the configuration could not be read, and why", user, r.Capability, r.Why)
			}
		}
	}
}
