package daemon

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/redact"
)

// TestHTTPTruncatedBodyFails (found by review; the bug it shows): TestHTTPJobStalledBodyEnds says a
// run whose answer is incomplete fails. An endpoint that sends 200 with
// Content-Length 100, 7 bytes of body and then drops the connection (a
// crash or proxy reset mid-answer) gives an incomplete answer too — but
// httpFunc only fails a body read error when its context ended, so this
// run is recorded succeeded.
func TestHTTPTruncatedBodyFails(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
		_ = buf.Flush()
		_ = conn.Close()
	}))
	t.Cleanup(srv.Close)
	j := &JobConfig{Name: "hook", HTTP: &HTTPJob{Method: "GET", URL: srv.URL}}
	err := httpFunc(j, srv.Client(), redact.NewScrubber(), 5*time.Second)(context.Background(), run)
	if err == nil {
		t.Fatal("the endpoint dropped the connection after 7 of 100 body bytes; the run succeeded")
	}
}
