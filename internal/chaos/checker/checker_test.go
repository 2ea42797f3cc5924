package checker

import (
	"testing"

	"github.com/leasehold/leasehold/internal/chaos/harness"
	"github.com/leasehold/leasehold/internal/chaos/history"
)

// A claim whose first attempt timed out and whose retry (same owner
// nonce) answered with that attempt's grant is not a token regression,
// even if another claim returned a greater token in between; a fresh
// request that gets a lower token is one.
func TestRegressionsCountFromTheFirstAttempt(t *testing.T) {
	c := &check{run: &harness.Run{}, r: &Report{}, ops: []Op{
		{Kind: history.Claim, Key: "chaos@100", Owner: "w0/a", Call: 10, Ret: 20, Result: history.Indeterminate},
		{Kind: history.Claim, Key: "chaos@200", Owner: "w1/b", Call: 15, Ret: 30, Result: history.OK, Token: 67},
		{Kind: history.Claim, Key: "chaos@100", Owner: "w0/a", Call: 40, Ret: 50, Result: history.OK, Token: 66},
	}}
	c.regressions()
	if len(c.r.Regressions) != 0 {
		t.Fatalf("a retry answering an earlier grant counted as a regression: %+v", c.r.Regressions)
	}
	c.ops = append(c.ops, Op{Kind: history.Claim, Key: "chaos@300", Owner: "w2/c", Call: 60, Ret: 70, Result: history.OK, Token: 65})
	c.regressions()
	if len(c.r.Regressions) != 1 || c.r.Regressions[0].Later != 65 || c.r.Regressions[0].Earlier != 67 {
		t.Fatalf("regressions = %+v, want 67 then 65", c.r.Regressions)
	}
}
