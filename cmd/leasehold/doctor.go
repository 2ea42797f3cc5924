package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/internal/doctor"
	"github.com/leasehold/leasehold/internal/open"
	"github.com/leasehold/leasehold/internal/redact"
)

func newDoctorCmd(a *app) *cobra.Command {
	var config string
	var rounds int
	cmd := &cobra.Command{
		Use:   "doctor [--backend URL | --config leasehold.yaml]",
		Short: "Show what a backend guarantees and why, its round trip and its clock offset",
		Long: `Open the backend (--backend, or the backend of --config, or the default) and
print each of its capabilities with the reason for it — read from the server's
configuration where that decides it (Redis's appendonly and maxmemory-policy,
PostgreSQL's fsync and synchronous_commit, MySQL's
innodb_flush_log_at_trx_commit, SQLite's synchronous) — the median round trip
of a few Gets, and the offset of the clock its expiry is judged by from this
host's, where the backend can report it. "leasehold run" logs the same
warnings at start.

Exit status 0 when the backend answered (whatever it guarantees), 70 when it
could not be opened or did not answer, 64 for bad usage.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if rounds < 1 {
				return usageErrorf("--rounds %d: at least 1", rounds)
			}
			raw := a.backendURL
			if config != "" {
				cfg, err := a.loadConfig(cmd, config)
				if err != nil {
					return err
				}
				raw = cfg.Backend
			}
			if raw == "" {
				var err error
				if raw, err = open.DefaultURL(); err != nil {
					return &exitError{code: ExitInternal, err: err}
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			b, err := a.openURL(ctx, raw)
			if err != nil {
				return err
			}
			defer b.Close()
			r, err := doctor.Check(ctx, b, rounds)
			if err != nil {
				return &exitError{code: ExitInternal, err: fmt.Errorf("backend %s: %w", redact.URL(raw), err)}
			}
			return r.WriteText(a.stdout, redact.URL(raw))
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "config `file` (YAML) whose backend to check")
	cmd.Flags().IntVar(&rounds, "rounds", 5, "Gets to time for the round trip")
	return cmd
}
