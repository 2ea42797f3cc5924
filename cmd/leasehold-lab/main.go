// Command leasehold-lab is leasehold's lab: the benchmarks and the fault
// harness, kept apart from the product so that the leasehold binary links
// no test server, chaos harness or linearizability checker (a test of
// cmd/leasehold checks it).
//
// Usage:
//
//	leasehold-lab bench redis [--url URL]   Redis backend vs the raw SET NX PX + DEL floor, crowd, hand-over
//	leasehold-lab bench matrix              every backend: latency, throughput, hand-over, failover RTO, chaos
//	leasehold-lab bench idle                a daemon's idle cost at 100…10,000 jobs
//	leasehold-lab chaos --backend KIND      fault harness with a history checker (docs/chaos.md)
//	leasehold-lab chaos check DIR           judge a recorded chaos run again
//
// From a checkout: go run ./cmd/leasehold-lab bench matrix --backends sqlite.
//
// # Where the benchmarks live
//
// The measurements have one home, this command and its package benchkit,
// which holds the scenarios (uncontended acquire+release, the crowd, the
// hand-over, the seed's burst) measured the same way everywhere. The Go
// benchmarks that compare leasehold with its peers (bsm/redislock,
// redsync, etcd's concurrency package, advisory locks over pgx and
// go-sql-driver/mysql) are in the bench/ module instead, because those
// peers are dependencies leasehold's own go.mod must not carry; they run
// benchkit's scenarios too. The per-package Go benchmarks (Benchmark* in
// _test.go files next to the code they measure) stay with their code.
//
// The commands that measure leasehold's binary ("bench idle" runs
// "leasehold run", "bench matrix" runs "leasehold lock") start the product
// binary named by --leasehold; by default the "leasehold" next to this
// binary, else one built from this module's source with "go build".
//
// Exit status: 0 on success, 1 if a chaos run found an invariant violated,
// 64 for bad usage, 70 for an internal or backend error.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/internal/redact"
)

// Exit codes of leasehold-lab, as leasehold's.
const (
	// ExitUsage: bad command line. EX_USAGE.
	ExitUsage = 64
	// ExitInternal: the backend or a measurement failed. EX_SOFTWARE.
	ExitInternal = 70
)

func main() {
	// As leasehold does: go-redis would log every failed dial on its own.
	goredis.SetLogger(&logging.VoidLogger{})
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// app holds what the lab's commands share.
type app struct {
	stdout, stderr io.Writer

	// leaseholdBin is --leasehold: the product binary the benchmarks run.
	leaseholdBin string

	started bool // a command's Run began: later errors are not usage errors
}

// exitError ends leasehold-lab with code, printing err if it is not nil.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// run executes leasehold-lab with args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr}
	root := newRootCmd(a)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	code := ExitInternal
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		code = ee.code
		err = ee.err
	case !a.started:
		code = ExitUsage // cobra: unknown command or flag, bad arguments
	}
	if err != nil {
		fmt.Fprintf(stderr, "leasehold-lab: %s\n", redact.Text(err.Error()))
		if code == ExitUsage {
			fmt.Fprintln(stderr, `leasehold-lab: run "leasehold-lab help" for usage`)
		}
	}
	return code
}

// newRootCmd builds the command tree.
func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "leasehold-lab",
		Short: "leasehold's benchmarks and fault harness (not part of the leasehold binary)",
		Long: `leasehold-lab measures leasehold against its peers and the backends' floors,
and runs worker processes against a backend under injected faults, checking
the history they record. It starts private backend servers from the
binaries installed on this host. The leasehold binary does not contain it.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRun: func(cmd *cobra.Command, args []string) {
			a.started = true
		},
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &exitError{code: ExitUsage, err: err}
	})
	root.PersistentFlags().StringVar(&a.leaseholdBin, "leasehold", "",
		"leasehold `binary` the benchmarks run (default: the leasehold next to this binary, else one built from this module)")
	root.AddCommand(newBenchCmd(a), newChaosCmd(a))
	return root
}
