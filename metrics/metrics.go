// Package metrics exports leasehold's lock, election and scheduler events as
// Prometheus metrics, and serves /healthz and /readyz.
//
// A *Metrics is both a leasehold.Observer and a schedule.Observer: pass it
// to leasehold.WithObserver and schedule.WithObserver. Its collectors are
// registered on the prometheus.Registerer the caller gives to New; the
// package keeps no global state and registers nothing by itself.
//
// Labels are bounded: backend, namespace, election role, job name, result.
// Lock keys are not labels (they are unbounded); per-key state is in the
// admin API.
package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/schedule"
)

// Metrics holds the collectors. Create it with New.
type Metrics struct {
	acquire       *prometheus.HistogramVec // backend, namespace, kind, result
	renewals      *prometheus.CounterVec   // backend, namespace, kind
	renewFailures *prometheus.CounterVec   // backend, namespace, kind
	lost          *prometheus.CounterVec   // backend, namespace, kind
	releases      *prometheus.CounterVec   // backend, namespace, kind, result
	leadership    *prometheus.CounterVec   // namespace, role, event
	leading       *prometheus.GaugeVec     // namespace, role

	claims    *prometheus.CounterVec   // namespace, job, result
	runs      *prometheus.CounterVec   // namespace, job, result
	runTime   *prometheus.HistogramVec // namespace, job, result
	runsLost  *prometheus.CounterVec   // namespace, job
	recovered *prometheus.CounterVec   // namespace, job, action
	retried   *prometheus.CounterVec   // namespace, job
	caughtUp  *prometheus.CounterVec   // namespace, job
	misfired  *prometheus.CounterVec   // namespace, job, policy
	pruned    *prometheus.CounterVec   // namespace
	prunes    *prometheus.CounterVec   // namespace, result
}

// Metric name prefix.
const prefix = "leasehold_"

// New creates the collectors and registers them on reg. It fails if one is
// already registered there (two Metrics on one registry would count twice).
func New(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: registerer is nil", leasehold.ErrInvalid)
	}
	latency := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m := &Metrics{
		acquire: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    prefix + "acquire_duration_seconds",
			Help:    "Duration of TryAcquire/Acquire calls (waiting included) and of an Elector's campaigns, by result: ok, held, canceled, indeterminate, invalid, error.",
			Buckets: latency,
		}, []string{"backend", "namespace", "kind", "result"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "renewals_total", Help: "Lease renewals that succeeded.",
		}, []string{"backend", "namespace", "kind"}),
		renewFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "renewal_failures_total", Help: "Lease renewal attempts that failed and were retried (not counting a lease the backend said was lost).",
		}, []string{"backend", "namespace", "kind"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "leases_lost_total", Help: "Leases lost by their holder: taken over, released by someone else, or deadline passed without a confirmed renewal.",
		}, []string{"backend", "namespace", "kind"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "releases_total", Help: "Lock releases, by result.",
		}, []string{"backend", "namespace", "kind", "result"}),
		leadership: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "leadership_changes_total",
			Help: "Leadership changes seen by this instance: elected, demoted_lost, demoted_resigned, demoted_done, new_leader (the observed leader changed).",
		}, []string{"namespace", "role", "event"}),
		leading: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: prefix + "leader", Help: "1 while this instance leads the role, else 0.",
		}, []string{"namespace", "role"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "claims_total", Help: "Occurrence claims by this instance, by result: won, conflict (another instance claimed first), overlap (concurrency limit), error.",
		}, []string{"namespace", "job", "result"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "runs_total", Help: "Job runs on this instance, by result: succeeded, failed.",
		}, []string{"namespace", "job", "result"}),
		runTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: prefix + "run_duration_seconds", Help: "How long job functions ran.",
			Buckets: []float64{.001, .01, .1, .5, 1, 5, 15, 30, 60, 300, 900, 3600},
		}, []string{"namespace", "job", "result"}),
		runsLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "runs_lost_total", Help: "Runs whose claim was lost while they ran (another instance may run the occurrence again).",
		}, []string{"namespace", "job"}),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "runs_recovered_total", Help: "Occurrences whose runner died, handled by this instance: reclaimed (crash policy retry) or abandoned.",
		}, []string{"namespace", "job", "action"}),
		retried: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "runs_retried_total", Help: "Failed runs retried by this instance after their backoff (Retry policy); not crashes.",
		}, []string{"namespace", "job"}),
		caughtUp: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "misfires_caught_up_total", Help: "Missed occurrences claimed by this instance under the job's misfire policy.",
		}, []string{"namespace", "job"}),
		misfired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "misfires_total", Help: "Occurrences that came due, or had their claim won, on this instance later than the job's misfire grace (paused, starved or clock stepped), by the policy applied.",
		}, []string{"namespace", "job", "policy"}),
		pruned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "ledger_pruned_runs_total", Help: "Run history records deleted by retention.",
		}, []string{"namespace"}),
		prunes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "ledger_prune_passes_total", Help: "Retention passes, by result: ok, error.",
		}, []string{"namespace", "result"}),
	}
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("metrics: already registered on this registerer: %w", err)
			}
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.acquire, m.renewals, m.renewFailures, m.lost, m.releases, m.leadership, m.leading,
		m.claims, m.runs, m.runTime, m.runsLost, m.recovered, m.retried, m.caughtUp, m.misfired, m.pruned, m.prunes}
}

// ObserveLock counts a lock or election event. It implements
// leasehold.Observer; it does not block.
func (m *Metrics) ObserveLock(ev leasehold.Event) {
	kind := "lock"
	if ev.Role != "" {
		kind = "role"
	}
	switch ev.Kind {
	case leasehold.EventAcquire:
		m.acquire.WithLabelValues(ev.Backend, ev.Namespace, kind, ev.Result).Observe(ev.Duration.Seconds())
	case leasehold.EventRenew:
		m.renewals.WithLabelValues(ev.Backend, ev.Namespace, kind).Inc()
	case leasehold.EventRenewFailed:
		m.renewFailures.WithLabelValues(ev.Backend, ev.Namespace, kind).Inc()
	case leasehold.EventLost:
		m.lost.WithLabelValues(ev.Backend, ev.Namespace, kind).Inc()
	case leasehold.EventRelease:
		m.releases.WithLabelValues(ev.Backend, ev.Namespace, kind, ev.Result).Inc()
	case leasehold.EventElected:
		m.leadership.WithLabelValues(ev.Namespace, ev.Role, "elected").Inc()
		m.leading.WithLabelValues(ev.Namespace, ev.Role).Set(1)
	case leasehold.EventDemoted:
		m.leadership.WithLabelValues(ev.Namespace, ev.Role, "demoted_"+ev.Result).Inc()
		m.leading.WithLabelValues(ev.Namespace, ev.Role).Set(0)
	case leasehold.EventNewLeader:
		m.leadership.WithLabelValues(ev.Namespace, ev.Role, "new_leader").Inc()
	}
}

// ObserveSchedule counts a scheduler event. It implements
// schedule.Observer; it does not block.
func (m *Metrics) ObserveSchedule(ev schedule.Event) {
	switch ev.Kind {
	case schedule.EventClaim:
		m.claims.WithLabelValues(ev.Namespace, ev.Job, ev.Result).Inc()
		if ev.CatchUp && ev.Result == schedule.ClaimWon {
			m.caughtUp.WithLabelValues(ev.Namespace, ev.Job).Inc()
		}
	case schedule.EventRun:
		m.runs.WithLabelValues(ev.Namespace, ev.Job, ev.Result).Inc()
		m.runTime.WithLabelValues(ev.Namespace, ev.Job, ev.Result).Observe(ev.Duration.Seconds())
	case schedule.EventRunLost:
		m.runsLost.WithLabelValues(ev.Namespace, ev.Job).Inc()
	case schedule.EventReclaim:
		m.recovered.WithLabelValues(ev.Namespace, ev.Job, "reclaimed").Inc()
	case schedule.EventRetry:
		m.retried.WithLabelValues(ev.Namespace, ev.Job).Inc()
	case schedule.EventAbandon:
		m.recovered.WithLabelValues(ev.Namespace, ev.Job, "abandoned").Inc()
	case schedule.EventMisfire:
		m.misfired.WithLabelValues(ev.Namespace, ev.Job, ev.Result).Add(float64(ev.Count))
	case schedule.EventPrune:
		m.pruned.WithLabelValues(ev.Namespace).Add(float64(ev.Count))
		res := "ok"
		if ev.Err != nil {
			res = "error"
		}
		m.prunes.WithLabelValues(ev.Namespace, res).Inc()
	}
}
