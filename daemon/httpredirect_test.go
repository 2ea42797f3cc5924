package daemon

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/redact"
)

// TestHTTPJobRedirects (issue 27 item 4): an HTTP job's redirect must not
// carry its custom headers (X-Api-Key) or its URL's query secrets (via
// Referer) to another host. By default a redirect to another origin is
// not followed; redirects: any follows it without the job's headers; a
// redirect on the same origin is followed with them, never with a Referer.
func TestHTTPJobRedirects(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []http.Header
	)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
	}))
	t.Cleanup(other.Close)
	var sameOrigin http.Header
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, other.URL+"/landing", http.StatusFound)
		case "/here":
			http.Redirect(w, r, "/landed", http.StatusFound)
		case "/landed":
			mu.Lock()
			sameOrigin = r.Header.Clone()
			mu.Unlock()
		}
	}))
	t.Cleanup(origin.Close)
	const key, querySecret = "key-0123456789-secret", "q-secret-0123456789"
	job := func(path, redirects string) *JobConfig {
		return &JobConfig{Name: "hook", HTTP: &HTTPJob{Method: "GET", URL: origin.URL + path + "?api_key=" + querySecret,
			Headers: map[string]string{"X-Api-Key": key, "Authorization": "Bearer " + key}, Redirects: redirects}}
	}
	leaked := func(h http.Header) bool {
		for _, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, key) || strings.Contains(v, querySecret) {
					return true
				}
			}
		}
		return false
	}

	// Default: no redirect to another origin.
	err := httpFunc(job("/away", ""), &http.Client{}, redact.NewScrubber(), 10*time.Second)(context.Background(), run)
	mu.Lock()
	got := append([]http.Header(nil), seen...)
	mu.Unlock()
	if len(got) != 0 {
		t.Errorf("default policy followed a redirect to another origin: it received %v", got)
	}
	if err == nil || !strings.Contains(err.Error(), "redirect") {
		t.Errorf("default policy, redirect to another origin: %v; want the run to fail saying the redirect was refused", err)
	}

	// redirects: any — followed, without the job's headers or a Referer.
	if err := httpFunc(job("/away", "any"), &http.Client{}, redact.NewScrubber(), 10*time.Second)(context.Background(), run); err != nil {
		t.Errorf("redirects: any: %v", err)
	}
	mu.Lock()
	got = append([]http.Header(nil), seen...)
	mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("redirects: any: the other origin got %d requests, want 1", len(got))
	}
	if leaked(got[0]) || got[0].Get("Referer") != "" || got[0].Get("X-Api-Key") != "" {
		t.Errorf("redirects: any carried the job's secrets to another origin: %v", got[0])
	}

	// Same origin: followed with the job's headers, no Referer.
	if err := httpFunc(job("/here", ""), &http.Client{}, redact.NewScrubber(), 10*time.Second)(context.Background(), run); err != nil {
		t.Errorf("same-origin redirect: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if sameOrigin == nil || sameOrigin.Get("X-Api-Key") != key || sameOrigin.Get("Referer") != "" {
		t.Errorf("same-origin redirect: headers %v; want X-Api-Key kept and no Referer", sameOrigin)
	}
}

// TestHTTPJobRedirectsField: a bad redirects value is refused naming the
// field and the value.
func TestHTTPJobRedirectsField(t *testing.T) {
	_, err := Parse("/tmp/r.yaml", []byte("jobs:\n  - name: hook\n    schedule: \"@every 1h\"\n    http: {url: \"http://127.0.0.1:1/\", redirects: elsewhere}\n"))
	if err == nil || !strings.Contains(err.Error(), "jobs[0].http.redirects") || !strings.Contains(err.Error(), "elsewhere") {
		t.Fatalf("Parse with redirects: elsewhere = %v; want an error naming jobs[0].http.redirects and the value", err)
	}
}
