package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/schedule"
)

// jobStateCollector exports each job's state at scrape time, read from
// the ledger as the status API reads it, so that every daemon's /metrics
// shows a job that runs nowhere (a schedule revert refused on one daemon
// while the others run the replaced version), whichever config it runs.
// With them, each job's run health (healthDescs), read from the run
// ledger: the same on every daemon too.
type jobStateCollector struct {
	srv       *admin.Server
	ledger    backend.Ledger // the namespace's
	namespace string
	log       *slog.Logger
	state     *prometheus.Desc
	running   *prometheus.Desc
	refused   *prometheus.Desc
	health    healthDescs

	mu     sync.Mutex
	jobs   []admin.Job          // the last reading, reused for jobStatesFresh
	runs   map[string]jobHealth // of the same reading, by job
	readAt time.Time
}

// jobStatesFresh is how long one reading of the job states serves
// scrapes: each costs a few ledger reads per job, and several Prometheus
// servers scraping every few seconds must not multiply them.
const jobStatesFresh = 10 * time.Second

func newJobStateCollector(srv *admin.Server, l backend.Ledger, namespace string, log *slog.Logger) *jobStateCollector {
	return &jobStateCollector{
		srv: srv, ledger: schedule.NamespaceLedger(l, namespace), namespace: namespace, log: log, health: newHealthDescs(),
		state: prometheus.NewDesc("leasehold_job_state",
			"1 for the job's state on this daemon (active, paused, pending, superseded, refused), 0 for the others: superseded and refused claim nothing.",
			[]string{"namespace", "job", "state"}, nil),
		running: prometheus.NewDesc("leasehold_job_running_anywhere",
			"0 when the job runs on no daemon of the namespace (paused, or no claim under the schedule version that applies since it applies), else 1; the same on every daemon.",
			[]string{"namespace", "job"}, nil),
		refused: prometheus.NewDesc("leasehold_job_refused_instances",
			"How many daemons of the namespace refuse their own schedule version of the job (a replaced spec still deployed there; they claim nothing), as each states while it refuses; the same on every daemon. The jobs API's cluster.refused_on names them.",
			[]string{"namespace", "job"}, nil),
	}
}

func (c *jobStateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.state
	ch <- c.running
	ch <- c.refused
	c.health.describe(ch)
}

func (c *jobStateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jobs == nil || time.Since(c.readAt) >= jobStatesFresh {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		jobs, runs, err := c.read(ctx)
		cancel()
		if err != nil {
			c.log.Warn("job states for /metrics could not be read", "err", err)
			return
		}
		c.jobs, c.runs, c.readAt = jobs, runs, time.Now()
	}
	jobs := c.jobs
	for _, j := range jobs {
		if h, ok := c.runs[j.Name]; ok {
			c.health.collect(ch, c.namespace, j.Name, h)
		}
		for _, s := range admin.JobStates {
			v := 0.0
			if s == j.State {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, v, c.namespace, j.Name, s)
		}
		running := 1.0
		if j.Cluster != nil && !j.Cluster.Running {
			running = 0
		}
		ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, running, c.namespace, j.Name)
		refused := 0.0
		if j.Cluster != nil {
			refused = float64(len(j.Cluster.RefusedOn))
		}
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.GaugeValue, refused, c.namespace, j.Name)
	}
}

// read reads the jobs' states and the run health of those that have a
// ledger history (not every-instance jobs).
func (c *jobStateCollector) read(ctx context.Context) ([]admin.Job, map[string]jobHealth, error) {
	jobs, err := c.srv.Jobs(ctx)
	if err != nil {
		return nil, nil, err
	}
	runs := map[string]jobHealth{}
	for _, j := range jobs {
		if j.Mode == string(schedule.EveryInstance) {
			continue
		}
		h, err := readHealth(ctx, c.ledger, j.Name)
		if err != nil {
			return nil, nil, err
		}
		runs[j.Name] = h
	}
	return jobs, runs, nil
}

// refusedEvery is how often the daemon looks for a job whose schedule
// version its scheduler refused (at start-up or after a reload).
const refusedEvery = time.Second

// adviseRefused logs, once per refusal, what to do about each job whose
// schedule version the scheduler refused: the config file and the
// `revision:` to set. The scheduler's own error names no config.
func (d *Daemon) adviseRefused(ctx context.Context) {
	told := map[string]string{} // job -> refused version already told
	t := time.NewTicker(refusedEvery)
	defer t.Stop()
	for {
		for _, js := range d.sched.JobStatuses(0) {
			if !js.VersionRefused {
				delete(told, js.Name)
				continue
			}
			if told[js.Name] == js.Version {
				continue
			}
			told[js.Name] = js.Version
			d.mu.Lock()
			path, rev := d.cfg.path, 0
			for _, j := range d.cfg.Jobs {
				if j.Name == js.Name {
					rev = j.Revision
				}
			}
			d.mu.Unlock()
			d.log.Error(fmt.Sprintf("job %q: schedule %q REFUSED: it was replaced by version %s (applying from %s) and versions only move forward, so this daemon claims nothing for the job. "+
				"To run this schedule again on purpose, set `revision: %d` on the job in %s (any number the job has not had) and reload every daemon; to keep the current version, deploy the config that has it",
				js.Name, js.Schedule, js.CurrentVersion, js.CurrentFrom.UTC().Format(time.RFC3339), rev+1, path),
				"job", js.Name, "version", js.Version, "current_version", js.CurrentVersion, "config", path, "revision", rev+1)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
