package admin_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

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
