package metrics_test

import (
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/metrics"
)

// TestReadyzTellsNoBackendAddress (issue 27 item 8): /readyz needs no
// token and answers any client, any Host; when the backend is unreachable
// it told them the backend's address (the client error repeats it). It
// says only that it is not ready.
func TestReadyzTellsNoBackendAddress(t *testing.T) {
	srv := testserver.Redis(t)
	addr := srv.Addr()
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	b, err := redis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	srv.Stop() // the backend becomes unreachable
	h, err := metrics.Readyz(b, "default", 0)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != 503 {
		t.Fatalf("/readyz with the backend unreachable = %d %s, want 503", rec.Code, body)
	}
	_, port, _ := net.SplitHostPort(addr)
	if strings.Contains(string(body), port) {
		t.Fatalf("/readyz told an unauthenticated client the backend's address: %s", body)
	}
}
