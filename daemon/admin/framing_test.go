package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold/backend/memory"
)

// TestSecurityHeaders (issue 18 item 3): every answer forbids framing and
// MIME sniffing and sends no referrer; an action whose Origin has this
// server's host but another scheme is refused.
func TestSecurityHeaders(t *testing.T) {
	n := startNode(t, memory.New(), "d1", "default", fmt.Sprintf(jobsYAML, "a"))
	for _, p := range []string{"/", "/dashboard/app.js", "/openapi.yaml", "/api/v1/status", "/api/v1/nothing", "/healthz"} {
		req, _ := http.NewRequest("GET", n.url+p, nil)
		if n.token != "" {
			req.Header.Set("Authorization", "Bearer "+n.token)
		}
		resp, err := n.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := resp.Header
		if !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") || h.Get("X-Frame-Options") != "DENY" ||
			h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("GET %s: CSP %q, X-Frame-Options %q, X-Content-Type-Options %q, Referrer-Policy %q", p,
				h.Get("Content-Security-Policy"), h.Get("X-Frame-Options"), h.Get("X-Content-Type-Options"), h.Get("Referrer-Policy"))
		}
	}
	host := strings.TrimPrefix(n.url, "http://")
	for origin, want := range map[string]int{"https://" + host: http.StatusForbidden, "http://" + host: http.StatusOK, "null": http.StatusForbidden} {
		req, _ := http.NewRequest("POST", n.url+"/api/v1/jobs/a-tick/pause", nil)
		req.Header.Set("Origin", origin)
		if n.token != "" {
			req.Header.Set("Authorization", "Bearer "+n.token)
		}
		resp, err := n.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("POST pause with Origin %q = %d, want %d", origin, resp.StatusCode, want)
		}
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
	waitFor(t, 30*time.Second, "the decoy's frame to load", func() bool {
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
