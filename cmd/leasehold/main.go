// Command leasehold is the command-line tool of the leasehold library:
// cluster-wide locks for shell scripts and cron jobs, and a view of the
// leases a backend holds.
//
// Usage:
//
//	leasehold lock [flags] KEY -- CMD [ARGS...]   run CMD while holding KEY (flock(1) for a cluster)
//	leasehold locks [--config F] [--json]         list the held locks of a namespace
//	leasehold run --config leasehold.yaml         the scheduler daemon: each occurrence claimed once
//	leasehold jobs --config leasehold.yaml        jobs and their next occurrences
//	leasehold runs [--config F] [--job NAME]      run history from the ledger
//	leasehold status, trigger JOB, pause JOB, resume JOB, resign ROLE
//	                                              a running daemon's admin API
//	leasehold demo                                3 daemons, one killed mid-job: see each occurrence run once
//	leasehold version                             print the module and Go versions
//
// Every command takes --backend URL (default $LEASEHOLD_BACKEND, else a
// SQLite file under $XDG_STATE_HOME/leasehold), --namespace and --instance.
// Run "leasehold help lock" for the exit codes.
package main

import (
	"os"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/leasehold/leasehold/internal/supervisor"
)

func main() {
	if supervisor.IsSupervisor(os.Args) {
		// A command's supervisor (internal/supervisor): before anything
		// else, so that starting a command costs as little as it can.
		os.Exit(supervisor.Main())
	}
	// go-redis logs every failed dial on its own, through a logger that is
	// global to the process; the error reaches leasehold's message and log
	// anyway. A library cannot choose for its users, so the command does.
	goredis.SetLogger(&logging.VoidLogger{})
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
