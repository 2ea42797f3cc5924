package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/backend"
)

// healthScan is how many of a job's latest occurrences one reading of
// its run health looks at: consecutive failures are counted among them
// (healthScan means "healthScan or more").
const healthScan = 50

// lastRunStates are the values of leasehold_job_last_run_state's state
// label: the finished states of an occurrence.
var lastRunStates = []backend.RunState{backend.Succeeded, backend.Failed, backend.Abandoned}

// jobHealth is a job's run health read from the run ledger: the same on
// every daemon of the namespace, whichever ran the occurrences.
type jobHealth struct {
	lastSuccess time.Time        // finish of the newest occurrence that succeeded; zero: none in the history
	lastState   backend.RunState // of the newest finished occurrence; "": none
	failures    int              // finished occurrences that failed or were abandoned since the newest that succeeded
}

// readHealth reads job's run health from l. Occurrences are taken newest
// scheduled instant first, as the ledger lists them; running ones
// (in progress, or held for a retry) are passed over.
func readHealth(ctx context.Context, l backend.Ledger, job string) (jobHealth, error) {
	var h jobHealth
	runs, err := l.ListRuns(ctx, backend.RunFilter{Job: job, Limit: healthScan})
	if err != nil {
		return h, fmt.Errorf("job %q: run history: %w", job, err)
	}
	for _, r := range runs {
		if !r.State.Finished() {
			continue
		}
		if h.lastState == "" {
			h.lastState = r.State
		}
		if r.State == backend.Succeeded {
			h.lastSuccess = r.FinishedAt
			return h, nil
		}
		h.failures++
	}
	if len(runs) < healthScan {
		return h, nil // the whole history was read: no success in it
	}
	ok, err := l.ListRuns(ctx, backend.RunFilter{Job: job, State: backend.Succeeded, Limit: 1})
	if err != nil {
		return h, fmt.Errorf("job %q: run history: %w", job, err)
	}
	if len(ok) > 0 {
		h.lastSuccess = ok[0].FinishedAt
	}
	return h, nil
}

// healthDescs are the run-health metrics of jobStateCollector.
type healthDescs struct {
	lastSuccess, lastState, failures *prometheus.Desc
}

func newHealthDescs() healthDescs {
	labels := []string{"namespace", "job"}
	return healthDescs{
		lastSuccess: prometheus.NewDesc("leasehold_job_last_success_timestamp_seconds",
			"When the job's newest occurrence that succeeded finished (Unix seconds), read from the run ledger: the same on every daemon. No sample while the history (retention) holds no success, nor for every-instance jobs, which have no ledger.",
			labels, nil),
		lastState: prometheus.NewDesc("leasehold_job_last_run_state",
			"1 for the state of the job's newest finished occurrence (succeeded, failed, abandoned), 0 for the others, read from the run ledger: the same on every daemon. No sample before one finished, nor for every-instance jobs.",
			[]string{"namespace", "job", "state"}, nil),
		failures: prometheus.NewDesc("leasehold_job_consecutive_failures",
			fmt.Sprintf("Finished occurrences of the job that failed or were abandoned since its newest success (counted among its latest %d: %d means %d or more), read from the run ledger: the same on every daemon. No sample for every-instance jobs.", healthScan, healthScan, healthScan),
			labels, nil),
	}
}

func (d healthDescs) describe(ch chan<- *prometheus.Desc) {
	ch <- d.lastSuccess
	ch <- d.lastState
	ch <- d.failures
}

// collect sends job's run-health samples.
func (d healthDescs) collect(ch chan<- prometheus.Metric, namespace, job string, h jobHealth) {
	ch <- prometheus.MustNewConstMetric(d.failures, prometheus.GaugeValue, float64(h.failures), namespace, job)
	if !h.lastSuccess.IsZero() {
		ch <- prometheus.MustNewConstMetric(d.lastSuccess, prometheus.GaugeValue, float64(h.lastSuccess.UnixMilli())/1000, namespace, job)
	}
	if h.lastState == "" {
		return
	}
	for _, s := range lastRunStates {
		v := 0.0
		if s == h.lastState {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(d.lastState, prometheus.GaugeValue, v, namespace, job, string(s))
	}
}
