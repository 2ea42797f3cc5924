package admin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

// TestDashboardShowsARefusedRevert: a daemon started with a job's schedule
// that a later version replaced (a revert) refuses it, and no daemon runs
// the version that applies: the dashboard's jobs table says REFUSED and
// NOT RUNNING ANYWHERE, with the note that says to set `revision:` — not
// "active"; the cluster-wide column names the daemon that refuses.
func TestDashboardShowsARefusedRevert(t *testing.T) {
	ctx := newBrowser(t, t.TempDir())
	b := memory.New()
	defer b.Close()
	record := func(spec string) {
		t.Helper()
		s, err := schedule.New(b, schedule.WithInstance("deployer"), schedule.WithNamespace("rv"),
			schedule.WithVersionSettle(300*time.Millisecond), schedule.WithClaimTolerance(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Register(schedule.Job{Name: "report", Schedule: spec, Func: func(context.Context, schedule.Run) error { return nil }}); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer s.Shutdown(context.Background())
		eventually.True(t, 20*time.Second, spec+" recorded as the current version", func() bool {
			js := s.JobStatuses(0)[0]
			return js.CurrentVersion == js.Version
		})
	}
	record("@every 1s")
	record("@every 2s")
	n := startNode(t, b, "web-1", "rv", "grace: 1s\njobs:\n  - name: report\n    schedule: \"@every 1s\"\n    command: {argv: [/bin/true]}\n")
	if err := chromedp.Do(ctx, chromedp.Navigate(n.url+"/")); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#token"), n.token), chromedp.Click(chromedp.CSS("#login-form button"))); err != nil {
		t.Fatalf("login: %v", err)
	}
	var cell, note string
	eventually.True(t, 40*time.Second, "the job shown refused and running nowhere", func() bool {
		var err error
		if cell, err = chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('#jobs tbody tr[data-job="report"] td[data-state]') || {}).textContent || ""`)); err != nil {
			return false
		}
		note, err = chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('#jobs tbody tr[data-job="report"] td[data-state]') || {title: ""}).title`))
		return err == nil && strings.Contains(cell, "REFUSED") && strings.Contains(cell, "NOT RUNNING ANYWHERE")
	})
	if !strings.Contains(note, "`revision:`") || strings.HasPrefix(cell, "active") {
		t.Errorf("job cell %q, note %q: want the revision: advice", cell, note)
	}
	// The cluster-wide column says the same, whichever daemon shows it.
	cluster, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('#jobs tbody tr[data-job="report"] td[data-running="false"]') || {}).textContent || ""`))
	if err != nil || !strings.HasPrefix(cluster, "NOT RUNNING ANYWHERE") || !strings.Contains(cluster, "refused on web-1 (@every 1s)") {
		t.Errorf("cluster-wide cell %q (%v): want NOT RUNNING ANYWHERE, refused on web-1 (@every 1s)", cluster, err)
	}
}
