package conformance

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/backend"
)

// checkOutcomeText: a job's output and error are arbitrary bytes (a
// command's stdout, an HTTP body), and Finish must record them on every
// backend — a text column that rejects NUL or invalid UTF-8 would leave the
// run "running" and have a job that succeeded run again under crash policy
// retry. What is stored is the text made valid the same way everywhere
// (backend.CleanText): each run of invalid bytes and each NUL becomes
// U+FFFD, valid UTF-8 is never split, and text over the limit keeps its
// head and its tail around a marker that says how much was cut.
func checkOutcomeText(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	ttl := e.ttl(30 * time.Second)
	long := "HEAD " + strings.Repeat("x", 3*backend.MaxResultLen) + " TAIL"
	cases := []struct {
		name        string
		result, err string
		wantResult  string // "" = only the properties below
		wantErr     string
	}{
		{name: "NUL bytes", result: "a\x00b\x00", err: "e\x00rr",
			wantResult: "a\uFFFDb\uFFFD", wantErr: "e\uFFFDrr"},
		{name: "invalid UTF-8", result: "ok \xff\xfe end", err: "bad \xc3( seq \xed\xa0\x80",
			wantResult: "ok \uFFFD end", wantErr: "bad \uFFFD( seq \uFFFD"},
		{name: "valid text untouched", result: "émoji 😀\ttab\r\n\x1b[31mred", err: "日本語",
			wantResult: "émoji 😀\ttab\r\n\x1b[31mred", wantErr: "日本語"},
		{name: "multi-byte rune at the limit", result: strings.Repeat("a", backend.MaxResultLen-1) + "é",
			err: strings.Repeat("a", backend.MaxErrorLen-1) + "é"},
		{name: "long text keeps head and tail", result: long, err: "E:" + long},
	}
	base := past(time.Hour)
	for i, c := range cases {
		at := base.Add(time.Duration(i) * time.Second)
		o := owner("text")
		g, err := b.Claim(ctx, claimReq("text", at, o, ttl))
		mustNil(t, err, "Claim "+c.name)
		err = b.Finish(ctx, backend.FinishRequest{Job: "text", ScheduledAt: at, Owner: o, Token: g.Token, Outcome: backend.Outcome{State: backend.Failed, Duration: time.Millisecond, Result: c.result, Error: c.err}})
		mustNil(t, err, fmt.Sprintf("Finish with %s", c.name))
		got, err := b.GetRun(ctx, "text", at)
		mustNil(t, err, "GetRun "+c.name)
		if got.State != backend.Failed {
			t.Errorf("%s: state %q after Finish, want %q", c.name, got.State, backend.Failed)
		}
		listed, err := b.ListRuns(ctx, backend.RunFilter{Job: "text", Limit: 100})
		mustNil(t, err, "ListRuns "+c.name)
		var inList *backend.Run
		for j := range listed {
			if listed[j].ScheduledAt.Equal(at) {
				inList = &listed[j]
			}
		}
		if inList == nil {
			t.Fatalf("%s: ListRuns does not list the run at %v", c.name, at)
		}
		for _, f := range []struct {
			what, in, stored, listed, want string
			max                            int
		}{
			{"result", c.result, got.Result, inList.Result, c.wantResult, backend.MaxResultLen},
			{"error", c.err, got.Error, inList.Error, c.wantErr, backend.MaxErrorLen},
		} {
			if f.stored != f.listed {
				t.Errorf("%s: GetRun's %s %.60q differs from ListRuns' %.60q", c.name, f.what, f.stored, f.listed)
			}
			if want := backend.CleanText(f.in, f.max); f.stored != want {
				t.Errorf("%s: stored %s is %d bytes %.80q…, want CleanText's %d bytes %.80q…", c.name, f.what, len(f.stored), f.stored, len(want), want)
			}
			if f.want != "" && f.stored != f.want {
				t.Errorf("%s: stored %s %q, want %q", c.name, f.what, f.stored, f.want)
			}
			if !utf8.ValidString(f.stored) || strings.ContainsRune(f.stored, 0) || len(f.stored) > f.max {
				t.Errorf("%s: stored %s (%d bytes) is not valid UTF-8 without NUL within %d bytes", c.name, f.what, len(f.stored), f.max)
			}
			if len(f.in) > f.max { // the cut inputs are valid UTF-8: both ends must survive intact
				if head := f.in[:16]; !strings.HasPrefix(f.stored, head) {
					t.Errorf("%s: stored %s lost its head %q: starts %q", c.name, f.what, head, f.stored[:min(len(f.stored), 40)])
				}
				if tail := f.in[len(f.in)-5:]; !strings.HasSuffix(f.stored, tail) {
					t.Errorf("%s: stored %s lost its tail %q: ends %q", c.name, f.what, tail, f.stored[max(0, len(f.stored)-40):])
				}
				if !strings.Contains(f.stored, "bytes cut") {
					t.Errorf("%s: stored %s was cut without saying so", c.name, f.what)
				}
			}
		}
	}
}
