package main

import "github.com/spf13/cobra"

// newBenchCmd is the parent of the benchmark commands. Each subcommand
// measures leasehold side by side with its peers in one run and reports
// ratios; none of them asserts a time.
func newBenchCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure leasehold against its peers and the backends' floors, in one run",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newBenchRedisCmd(a))
	cmd.AddCommand(newBenchMatrixCmd(a))
	cmd.AddCommand(newBenchIdleCmd(a))
	return cmd
}
