// Package cronwrap is a robfig/cron/v3 JobWrapper that runs each occurrence
// of a job once across many instances, by claiming it in leasehold's run
// ledger: job name + the firing time rounded to the job's period.
//
// It suits cron-spec jobs, which fire at the same instants on every
// instance. robfig's @every counts from each process's start, so instances
// have no common instants; use package schedule, whose @every is anchored to
// the Unix epoch, for those.
package cronwrap

import (
	"context"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/schedule"
)

// Once returns a JobWrapper that claims each occurrence of the named job in
// b before running it, and skips it if another instance claimed it first.
// quantum is the job's period (time.Second for a per-second spec,
// time.Minute for a per-minute one); firing times are rounded to it. The
// outcome is recorded in the ledger; a panic is recorded as a failure and
// re-raised for robfig's Recover wrapper.
func Once(b backend.Ledger, job, instance string, quantum time.Duration) cron.JobWrapper {
	opts := schedule.ClaimOptions{Instance: instance, MaxEarly: quantum / 2}
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() {
			ctx := context.Background()
			c, err := schedule.ClaimOccurrence(ctx, b, job, time.Now().Round(quantum), opts)
			if err != nil {
				return // claimed elsewhere, or the backend is unreachable: not ours to run
			}
			finished := false
			defer func() {
				if !finished {
					_ = c.Finish(ctx, errPanicked)
				}
			}()
			j.Run()
			finished = true
			_ = c.Finish(ctx, nil)
		})
	}
}

type panicked struct{}

func (panicked) Error() string { return "job panicked" }

var errPanicked error = panicked{}
