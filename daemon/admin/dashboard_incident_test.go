package admin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// EnvScreenshotDir names a directory the incident dashboard test also
// writes its screenshots to (docs/dashboard-*.png are made this way).
const EnvScreenshotDir = "LEASEHOLD_DASHBOARD_SCREENSHOTS"

// browserPage drives the dashboard in headless Chromium for one test.
type browserPage struct {
	t   *testing.T
	ctx context.Context
	dir string
}

func (p *browserPage) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

// clickRow clicks the element sel finds, in one step of the page's own
// thread: a table the dashboard redraws (every few seconds) can replace the
// node between a CDP click's lookup and its click ("Could not find node with
// given id", seen under load), so the lookup and the click are one script,
// retried until the element is there.
func (p *browserPage) clickRow(what, sel string) {
	p.t.Helper()
	eventually.True(p.t, 60*time.Second, what, func() bool {
		return p.is(`(() => { const el = document.querySelector('` + sel + `'); if (!el) return false; el.click(); return true })()`)
	})
}

func (p *browserPage) is(expr string) bool {
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](expr))
	return err == nil && v
}

func (p *browserPage) strs(expr string) []string {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[[]string](expr))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func (p *browserPage) str(expr string) string {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// shot saves a screenshot of the element sel as name (in the test's
// directory, and in $LEASEHOLD_DASHBOARD_SCREENSHOTS when set).
func (p *browserPage) shot(sel, name string) {
	p.t.Helper()
	png, err := chromedp.Run(p.ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil {
		p.t.Fatalf("screenshot of %s: %v", sel, err)
	}
	dirs := []string{p.dir}
	if d := os.Getenv(EnvScreenshotDir); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, name), png, 0o644); err != nil {
			p.t.Fatal(err)
		}
	}
	p.t.Logf("screenshot %s: %d bytes", name, len(png))
}

// TestDashboardAsAnIncidentTool (issue 28 item 12), in headless Chromium
// on two daemons sharing SQLite after a bad minute: filters narrow the
// runs (in the API), a click on a failed run shows its detail — token,
// instance, every attempt's error, the output's head and tail — the time
// axis marks the late run and the missed instants, and an action asks for
// confirmation (cancel does nothing) and says what it did.
func TestDashboardAsAnIncidentTool(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil && !inCI() {
		t.Skipf("no chromium at %s", chromiumPath) // in CI, newBrowser fails
	}
	in := startIncident(t)
	n := in.nodes[0]
	dir := t.TempDir()
	p := &browserPage{t: t, ctx: newBrowserFor(t, dir, 5*time.Minute), dir: dir}
	// The page's script errors fail the test.
	var mu sync.Mutex
	var scriptErrs []string
	if err := chromedp.Listen(p.ctx, func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok && e.ExceptionDetails != nil {
			mu.Lock()
			scriptErrs = append(scriptErrs, fmt.Sprintf("%s %+v", e.ExceptionDetails.Text, e.ExceptionDetails.Exception))
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range scriptErrs {
			t.Errorf("script error on the page: %s", e)
		}
	}()
	p.do("navigate", chromedp.Navigate(n.url+"/"))
	eventually.True(t, 60*time.Second, "the login form", func() bool { return p.is(`!document.getElementById("login").hidden`) })
	p.do("login", chromedp.SetValue(chromedp.CSS("#token"), n.token), chromedp.Click(chromedp.CSS("#login-form button")))
	eventually.True(t, 60*time.Second, "the runs listed", func() bool {
		return p.is(`document.body.dataset.loaded === "true" && document.querySelectorAll("#runs tbody tr[data-job]").length > 0`)
	})
	// The cluster-wide state of each job (item 2) is shown.
	if got := p.strs(`[...document.querySelectorAll("#jobs tbody tr")].map(r => r.dataset.job + ":" + r.children[6].dataset.running)`); strings.Join(got, ",") != "flaky:true,ok:true,report:true" {
		t.Errorf("cluster-wide states shown: %v", got)
	}

	// Filters: job and state, applied by the API.
	all := len(p.strs(`[...document.querySelectorAll("#runs tbody tr[data-job]")].map(r => r.dataset.job)`))
	p.do("filter flaky, failed", chromedp.SetValue(chromedp.CSS("#f-job"), "flaky"), chromedp.SetValue(chromedp.CSS("#f-state"), "failed"),
		chromedp.Click(chromedp.CSS(`#filters button[type="submit"]`)))
	eventually.True(t, 60*time.Second, "only failed runs of flaky listed", func() bool {
		return p.is(`(() => { const rs = [...document.querySelectorAll("#runs tbody tr[data-job]")];
			return rs.length > 0 && rs.every(r => r.dataset.job === "flaky" && r.children[2].textContent === "failed") })()`)
	})
	if got := len(p.strs(`[...document.querySelectorAll("#runs tbody tr[data-job]")].map(r => r.dataset.job)`)); got >= all {
		t.Errorf("the filter listed %d runs, not fewer than the %d unfiltered", got, all)
	}
	// A click on the failed run: its detail.
	sel := `#runs tbody tr[data-at="` + in.failed.ScheduledAt + `"]`
	eventually.True(t, 60*time.Second, "the failed run listed", func() bool { return p.is(`document.querySelector('` + sel + `') !== null`) })
	p.clickRow("click the failed run", sel)
	eventually.True(t, 60*time.Second, "the run's detail", func() bool {
		return p.is(`!document.getElementById("detail").hidden && document.getElementById("detail").dataset.at === "` + in.failed.ScheduledAt + `"`)
	})
	fact := func(k string) string {
		return p.str(`document.querySelector('#detail-facts dd[data-k="` + k + `"]').textContent`)
	}
	if fact("token") != in.failed.Token.String() || fact("instance") != in.failed.Instance || fact("state") != "failed" || fact("attempt") != "3" {
		t.Errorf("detail shows token %s instance %s state %s attempt %s; the run: %+v", fact("token"), fact("instance"), fact("state"), fact("attempt"), in.failed)
	}
	attempts := p.strs(`[...document.querySelectorAll("#attempts tbody tr")].map(r => r.dataset.attempt + ":" + r.children[1].textContent + ":" + r.children[6].textContent)`)
	if len(attempts) != 3 {
		t.Fatalf("attempts shown: %v", attempts)
	}
	for i, a := range attempts {
		if !strings.HasPrefix(a, string(rune('1'+i))+":failed:") || !strings.Contains(a, "exit status 3") {
			t.Errorf("attempt row %d: %q", i+1, a)
		}
	}
	if more := p.str(`document.querySelector('#detail-output [data-output="output"] button.more').textContent`); !strings.Contains(more, "bytes were cut from the middle") {
		t.Errorf("the hidden middle of the output says %q, not that the ledger cut it", more)
	}
	head := p.str(`document.querySelector('#detail-output [data-output="output"] pre.head').textContent`)
	tail := p.str(`document.querySelector('#detail-output [data-output="output"] pre.tail').textContent`)
	if !strings.HasPrefix(head, "1\n2\n3\n") || !strings.Contains(tail, "attempt 3 on "+in.failed.Instance+": disk full") {
		t.Errorf("output head %q…, tail …%q", head[:min(12, len(head))], tail[max(0, len(tail)-60):])
	}
	p.shot("#detail", "dashboard-run.png")

	// Instance filter, then paging through one instance's runs.
	p.do("filter web-2, 10 a page", chromedp.Click(chromedp.CSS("#f-clear")))
	p.do("filter web-2", chromedp.SetValue(chromedp.CSS("#f-instance"), "web-2"), chromedp.SetValue(chromedp.CSS("#f-limit"), "10"),
		chromedp.Click(chromedp.CSS(`#filters button[type="submit"]`)))
	rowsOf := `[...document.querySelectorAll("#runs tbody tr[data-job]")].map(r => r.dataset.instance + "|" + r.dataset.job + "@" + r.dataset.at)`
	eventually.True(t, 60*time.Second, "ten runs of web-2 and an older page", func() bool {
		rs := p.strs(rowsOf)
		for _, r := range rs {
			if !strings.HasPrefix(r, "web-2|") {
				return false
			}
		}
		return len(rs) == 10 && p.is(`!document.getElementById("page-older").disabled`)
	})
	first := p.strs(rowsOf)
	p.do("older page", chromedp.Click(chromedp.CSS("#page-older")))
	eventually.True(t, 60*time.Second, "page 2 of web-2's runs", func() bool {
		rs := p.strs(rowsOf)
		for _, r := range rs {
			if !strings.HasPrefix(r, "web-2|") || contains(first, r) {
				return false
			}
		}
		return len(rs) > 0 && p.is(`!document.getElementById("page-newer").disabled`)
	})

	// The time axis: the late run and the missed instants of ok.
	eventually.True(t, 40*time.Second, "the late run and missed instants of ok on its axis", func() bool {
		return p.is(`(() => { const row = document.querySelector('#timeline .tl-row[data-job="ok"]');
			return row && row.querySelectorAll(".mark.missed").length >= 2 && row.querySelector('.cell.late[data-instance="web-9"]') !== null })()`)
	})
	if got := p.strs(`[...document.querySelectorAll('#timeline .tl-row[data-job="flaky"] .mark')].map(m => m.dataset.state)`); contains(got, "missed") || !contains(got, "failed") {
		t.Errorf("axis of flaky shows %v, want failed runs and no missed instant", got)
	}
	p.do("2 min window", chromedp.SetValue(chromedp.CSS("#axis-window"), "120"))
	if !p.is(`document.getElementById("axis-window").dispatchEvent(new Event("change"))`) {
		t.Fatal("window change not dispatched")
	}
	eventually.True(t, 60*time.Second, "the axes redrawn", func() bool {
		return p.is(`document.querySelector('#timeline .tl-row[data-job="ok"] .mark.missed') !== null`)
	})
	p.shot("#timeline", "dashboard-axis.png")

	// An action: cancel does nothing; confirm pauses and says so.
	const pauseReport = `#jobs tbody tr[data-job="report"] button.pause`
	p.clickRow("pause report", pauseReport)
	eventually.True(t, 60*time.Second, "the confirmation", func() bool { return p.is(`document.getElementById("confirm").open`) })
	if txt := p.str(`document.getElementById("confirm-text").textContent`); txt != "Pause report?" {
		t.Errorf("confirmation asks %q", txt)
	}
	p.do("cancel", chromedp.Click(chromedp.CSS("#confirm-cancel")))
	eventually.True(t, 60*time.Second, "the cancel said", func() bool {
		return p.is(`document.getElementById("result").dataset.kind === "muted" && !document.getElementById("confirm").open`)
	})
	var job struct{ Paused bool }
	if n.mustGet("/api/v1/jobs/report", &job); job.Paused {
		t.Fatal("cancel paused the job")
	}
	p.clickRow("pause report again", pauseReport)
	eventually.True(t, 60*time.Second, "the confirmation", func() bool { return p.is(`document.getElementById("confirm").open`) })
	p.shot("#confirm", "dashboard-confirm.png")
	p.do("confirm", chromedp.Click(chromedp.CSS("#confirm-ok")))
	eventually.True(t, 60*time.Second, "the result message and the job paused", func() bool {
		return p.is(`document.getElementById("result").dataset.kind === "ok" &&
			document.getElementById("result-text").textContent === "Paused report on every instance." &&
			document.querySelector('#jobs tbody tr[data-job="report"] button.resume') !== null`)
	})
	if n.mustGet("/api/v1/jobs/report", &job); !job.Paused {
		t.Error("the confirmed pause did not pause the job")
	}
	p.do("close the detail", chromedp.Click(chromedp.CSS("#detail-close")))
	p.shot("body", "dashboard-action.png")
}
