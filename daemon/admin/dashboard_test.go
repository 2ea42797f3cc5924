package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

// chromiumPath is Debian's chromium (scripts/test installs it).
const chromiumPath = "/usr/bin/chromium"

// EnvScreenshot names a file the dashboard test also writes its screenshot
// to (docs/dashboard.png is made this way).
const EnvScreenshot = "LEASEHOLD_DASHBOARD_SCREENSHOT"

const dashboardJobs = `
grace: 2s
jobs:
  - name: tick
    schedule: "@every 1s"
    lease_ttl: 2s
    command: {argv: [/bin/true]}
  - name: lead
    schedule: "@every 1s"
    mode: leader
    lease_ttl: 2s
    command: {argv: [/bin/true]}
  - name: report
    schedule: "@every 2s"
    lease_ttl: 3s
    command: {argv: [/bin/sleep, "0.4"]}
  - name: flaky
    schedule: "@every 3s"
    lease_ttl: 2s
    command: {argv: [/bin/false]}
`

// newBrowser starts headless Chromium with a profile in dir; the test's
// cleanup stops it. It skips (fails in CI) when Chromium is missing.
func newBrowser(t *testing.T, dir string) context.Context {
	t.Helper()
	return newBrowserFor(t, dir, 90*time.Second)
}

// newBrowserFor is newBrowser whose browser lives at most within.
func newBrowserFor(t *testing.T, dir string, within time.Duration) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if inCI() {
			t.Fatalf("chromium is required in CI: %v", err)
		}
		t.Skipf("no chromium at %s", chromiumPath)
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(filepath.Join(dir, "profile")), chromedp.WindowSize(1400, 1150))
	ctx, cancel := chromedp.NewContext(actx)
	ctx, tcancel := context.WithTimeout(ctx, within)
	t.Cleanup(func() { tcancel(); cancel(); acancel() })
	return ctx
}

// TestDashboardLogin: with tokens configured the page asks for one, refuses
// a wrong one and shows the data once a valid one is given.
func TestDashboardLogin(t *testing.T) {
	ctx := newBrowser(t, t.TempDir())
	conf := fmt.Sprintf(jobsYAML, "a") + fmt.Sprintf("http:\n  tokens:\n    - {scope: read, token: %q}\n", readSecret)
	n := startNode(t, memory.New(), "d1", "default", conf)
	if err := chromedp.Do(ctx, chromedp.Navigate(n.url+"/")); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	js := func(expr string) bool {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		return err == nil && v
	}
	eventually.True(t, 30*time.Second, "the login form", func() bool { return js(`!document.getElementById("login").hidden`) })
	if js(`document.body.dataset.loaded === "true"`) {
		t.Fatal("data shown without a token")
	}
	login := func(token string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#login-form button"))); err != nil {
			t.Fatalf("login: %v", err)
		}
	}
	login("wrong-token-0123456789")
	eventually.True(t, 30*time.Second, "the wrong token refused", func() bool {
		return js(`document.getElementById("login-msg").textContent.includes("not valid")`)
	})
	login(readSecret)
	eventually.True(t, 30*time.Second, "the data shown after login", func() bool {
		return js(`document.body.dataset.loaded === "true" && document.getElementById("login").hidden && document.querySelector('#instances tbody tr[data-instance="d1"]') !== null`)
	})
}

// TestDashboardInBrowser starts three daemons on one backend, forces a
// leader change, loads the dashboard in headless Chromium and checks what
// the page shows; it saves a screenshot.
func TestDashboardInBrowser(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil && !inCI() {
		t.Skipf("no chromium at %s", chromiumPath) // in CI, newBrowser fails
	}
	b := memory.New()
	nodes := map[string]*node{}
	for _, name := range []string{"web-1", "web-2", "web-3"} {
		nodes[name] = startNode(t, b, name, "default", dashboardJobs)
	}
	n := nodes["web-1"]
	leaderOf := func() (string, admin.Leader) {
		var st struct{ Leaders []admin.Leader }
		n.mustGet("/api/v1/leaders", &st)
		for _, l := range st.Leaders {
			if l.Role == schedule.LeaderRole {
				return l.Instance, l
			}
		}
		return "", admin.Leader{}
	}
	leadRunners := func() map[string]bool {
		var p admin.RunPage
		n.mustGet("/api/v1/runs?job=lead&state=succeeded", &p)
		m := map[string]bool{}
		for _, r := range p.Runs {
			m[r.Instance] = true
		}
		return m
	}
	var first string
	eventually.True(t, 20*time.Second, "a leader that ran the leader job", func() bool {
		first, _ = leaderOf()
		return first != "" && leadRunners()[first]
	})
	// Force a leader change through the leader's own API.
	if code, m := nodes[first].call("POST", "/api/v1/leaders/schedule%2Fleader/resign", nil); code != 200 {
		t.Fatalf("resign = %d %v", code, m)
	}
	var second string
	eventually.True(t, 20*time.Second, "a new leader that ran the leader job", func() bool {
		second, _ = leaderOf()
		return second != "" && second != first && leadRunners()[second]
	})
	eventually.True(t, 20*time.Second, "a failed and a succeeded run of report", func() bool {
		var f, s admin.RunPage
		n.mustGet("/api/v1/runs?job=flaky&state=failed", &f)
		n.mustGet("/api/v1/runs?job=report&state=succeeded", &s)
		return len(f.Runs) > 0 && len(s.Runs) > 1
	})

	dir := t.TempDir()
	ctx := newBrowser(t, dir)
	if err := chromedp.Do(ctx, chromedp.Navigate(n.url+"/")); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	// The API needs the admin token the daemon generated (no token is
	// configured): paste it into the login form, as a user does from the
	// token file.
	eventually.True(t, 30*time.Second, "the login form", func() bool {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!document.getElementById("login").hidden`))
		return err == nil && v
	})
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#token"), n.token), chromedp.Click(chromedp.CSS("#login-form button"))); err != nil {
		t.Fatalf("login: %v", err)
	}
	var loaded bool
	eventually.True(t, 30*time.Second, "the page loaded its data", func() bool {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.body.dataset.loaded === "true" && document.querySelectorAll("#runs tbody tr[data-job]").length > 0`))
		loaded = err == nil && v
		return loaded
	})
	strs := func(expr string) []string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return v
	}
	instances := strs(`[...document.querySelectorAll("#instances tbody tr")].map(r => r.dataset.instance + ":" + r.children[1].textContent)`)
	for _, want := range []string{"web-1:alive", "web-2:alive", "web-3:alive"} {
		if !contains(instances, want) {
			t.Errorf("instances shown %v, lack %s", instances, want)
		}
	}
	leaders := strs(`[...document.querySelectorAll("#leaders tbody tr")].map(r => r.dataset.role + "=" + r.dataset.leader)`)
	now, _ := leaderOf()
	if len(leaders) != 1 || leaders[0] != schedule.LeaderRole+"="+now {
		t.Errorf("leaders shown %v, want %s=%s", leaders, schedule.LeaderRole, now)
	}
	jobs := strs(`[...document.querySelectorAll("#jobs tbody tr")].map(r => r.dataset.job)`)
	if strings.Join(jobs, ",") != "flaky,lead,report,tick" {
		t.Errorf("jobs shown %v", jobs)
	}
	states := strs(`[...document.querySelectorAll("#runs tbody tr")].map(r => r.children[2].textContent)`)
	if !contains(states, "succeeded") || !contains(states, "failed") {
		t.Errorf("run states shown %v lack succeeded and failed", states)
	}
	// The timeline of the leader job shows both leaders' occurrences.
	cells := strs(`[...document.querySelectorAll('#timeline .tl-row[data-job="lead"] .cell')].map(c => c.dataset.instance)`)
	if !contains(cells, first) || !contains(cells, second) {
		t.Errorf("timeline of lead shows instances %v, want %s and %s", cells, first, second)
	}
	locks := strs(`[...document.querySelectorAll("#locks tbody tr")].map(r => r.children[0].textContent)`)
	if !contains(locks, "instances/web-1") {
		t.Errorf("locks shown %v", locks)
	}

	// Ten runs a page and a narrower page keep the picture small.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1120, 900), chromedp.SetValue(chromedp.CSS("#f-limit"), "10"), chromedp.Click(chromedp.CSS(`#filters button[type="submit"]`))); err != nil {
		t.Fatalf("ten runs a page: %v", err)
	}
	eventually.True(t, 30*time.Second, "ten runs listed", func() bool {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelectorAll("#runs tbody tr[data-job]").length === 10`))
		return err == nil && v
	})
	// A two-minute time axis: the runs so far spread over it.
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#axis-window"), "120")); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, "the two-minute axis", func() bool {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("axis-window").dispatchEvent(new Event("change")) &&
			document.querySelector("#timeline .tick") !== null && document.querySelector("#timeline .tick").textContent !== ""`))
		return err == nil && v
	})
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	out := filepath.Join(dir, "dashboard.png")
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", out, len(shot))
	if p := os.Getenv(EnvScreenshot); p != "" {
		if err := os.WriteFile(p, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot also written to %s", p)
	}
}

// TestDashboardCannotBeFramed (issue 18 item 3): a decoy page on another
// origin that frames the dashboard (to make a visitor click "run now"
// through it) gets a frame the browser refused to render.
func TestDashboardCannotBeFramed(t *testing.T) {
	ctx := newBrowser(t, t.TempDir())
	n := startNode(t, memory.New(), "d1", "default", fmt.Sprintf(jobsYAML, "a"))
	decoy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>win a prize</title><button style="position:absolute;top:300px;left:600px;z-index:0">claim</button>
<iframe id="victim" src="%s/" style="opacity:0.01;position:absolute;top:0;left:0;width:1200px;height:900px;z-index:1" onload="window.framed=true"></iframe>`, n.url)
	}))
	defer decoy.Close()
	if err := chromedp.Do(ctx, chromedp.Navigate(decoy.URL)); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	// The frame's document: the dashboard if the browser rendered it, an
	// error page (chrome-error://…, or the dashboard URL as unreachable)
	// if it refused to.
	frameURL := func() (string, string) {
		tree, err := chromedp.Run(ctx, chromedp.Action[*page.GetFrameTreeResult](func(c context.Context, tg *chromedp.Target) (*page.GetFrameTreeResult, error) {
			r, err := cdp.Call(c, tg, page.GetFrameTree, cdp.Empty{})
			return &r, err
		}))
		if err != nil || tree.FrameTree == nil || len(tree.FrameTree.ChildFrames) == 0 {
			return "", ""
		}
		f := tree.FrameTree.ChildFrames[0].Frame
		return f.URL, f.UnreachableURL
	}
	var url, unreachable string
	eventually.True(t, 30*time.Second, "the decoy's frame to load", func() bool {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.framed === true`))
		if err != nil || !v {
			return false
		}
		url, unreachable = frameURL()
		return url != ""
	})
	if url == n.url+"/" && unreachable == "" {
		t.Fatalf("the dashboard rendered inside a frame of another origin (%s): clickjacking is possible", decoy.URL)
	}
	t.Logf("framed dashboard refused: frame URL %q, unreachable %q", url, unreachable)
}
