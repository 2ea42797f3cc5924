package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
)

// Prober is the backend call readiness makes: one Get of a key that
// normally does not exist. backend.Leases implements it.
type Prober interface {
	Get(ctx context.Context, key string) (backend.Lease, error)
}

// DefaultProbeTimeout bounds the readiness probe's backend call.
const DefaultProbeTimeout = 2 * time.Second

// probePath is the lock key read by the readiness probe, inside the
// instance's namespace so that a backend account confined to the namespace
// may read it.
const probePath = "leasehold-readyz"

// Healthz answers 200 while the process can serve HTTP. It checks nothing
// else: a restart would not fix an unreachable backend.
func Healthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusOK, "alive", "")
	})
}

// Readyz answers 200 when the backend is reachable: one Get of a key in
// namespace ("leasehold-readyz") answers, found or not, within timeout
// (≤ 0: DefaultProbeTimeout). Otherwise it answers 503, saying only that
// the backend is unreachable (not the error, which names its address).
func Readyz(p Prober, namespace string, timeout time.Duration) (http.Handler, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: prober is nil", leasehold.ErrInvalid)
	}
	if err := leasehold.ValidatePath("namespace", namespace); err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	key := leasehold.LockKey(namespace, probePath)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		_, err := p.Get(ctx, key)
		if err != nil && !errors.Is(err, backend.ErrNotFound) {
			// The probe needs no token and answers any client: the
			// error (which names the backend's address, and may repeat
			// URL secrets) is for the daemon's log and the token-holding
			// API, not for it.
			writeStatus(w, http.StatusServiceUnavailable, "unready", "backend unreachable")
			return
		}
		writeStatus(w, http.StatusOK, "ready", "")
	}), nil
}

func writeStatus(w http.ResponseWriter, code int, status, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	body := map[string]string{"status": status}
	if msg != "" {
		body["error"] = msg
	}
	_ = json.NewEncoder(w).Encode(body)
}

// Handler serves the metrics gathered by g in the Prometheus text format.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}

// Routes returns the handlers to mount on an HTTP server, by ServeMux
// pattern: "GET /metrics", "GET /healthz" and "GET /readyz". The registry is
// where New registered the collectors.
func Routes(reg *prometheus.Registry, p Prober, namespace string) (map[string]http.Handler, error) {
	ready, err := Readyz(p, namespace, 0)
	if err != nil {
		return nil, err
	}
	return map[string]http.Handler{
		"GET /metrics": Handler(reg),
		"GET /healthz": Healthz(),
		"GET /readyz":  ready,
	}, nil
}
