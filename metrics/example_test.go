package metrics_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/schedule"
)

// Pass one *Metrics to the Locker, Elector and Scheduler you build, and mount
// the routes on your HTTP server.
func ExampleNew() {
	b := memory.New()
	defer b.Close()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		panic(err)
	}
	lk, _ := leasehold.NewLocker(b, leasehold.WithObserver(m), leasehold.WithNamespace("shop"))
	if _, err := schedule.New(b, schedule.WithObserver(m), leasehold.WithNamespace("shop")); err != nil {
		panic(err)
	}
	l, _ := lk.TryAcquire(context.Background(), "invoices")
	_ = l.Release(context.Background())

	routes, _ := metrics.Routes(reg, b, "shop")
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.Handle(pattern, h)
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	fmt.Print(rec.Code, " ", rec.Body.String())
	// Output: 200 {"status":"ready"}
}
