package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/internal/doctor"
	"github.com/leasehold/leasehold/internal/open"
	"github.com/leasehold/leasehold/internal/redact"
)

func newDoctorCmd(a *app) *cobra.Command {
	var config string
	var rounds int
	var asJSON bool
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
			if err := a.mustExist(raw); err != nil {
				return err
			}
			b, err := a.openURL(ctx, raw)
			if err != nil {
				return err
			}
			defer b.Close()
			r, err := doctor.Check(ctx, b, rounds)
			if err != nil {
				return &exitError{code: ExitInternal, err: fmt.Errorf("backend %s: %w", redact.URL(raw), err)}
			}
			if asJSON {
				return writeDoctorJSON(a.stdout, r, redact.URL(raw))
			}
			return r.WriteText(a.stdout, redact.URL(raw))
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "config `file` (YAML) whose backend to check")
	cmd.Flags().IntVar(&rounds, "rounds", 5, "Gets to time for the round trip")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON (durations in milliseconds)")
	return cmd
}

// doctorJSON is "leasehold doctor --json": the report, for scripts.
type doctorJSON struct {
	Backend       string           `json:"backend"` // the URL, redacted
	Name          string           `json:"name"`
	RTTMS         float64          `json:"rtt_ms"`
	Rounds        int              `json:"rounds"`
	ClockKnown    bool             `json:"clock_known"`
	OffsetMS      *float64         `json:"clock_offset_ms,omitempty"`
	OffsetBoundMS *float64         `json:"clock_offset_bound_ms,omitempty"`
	KillMode      string           `json:"kill_mode,omitempty"`
	KillModeWhy   string           `json:"kill_mode_why,omitempty"`
	ReadAt        string           `json:"read_at,omitempty"`
	ExplainError  string           `json:"explain_error,omitempty"`
	RefreshError  string           `json:"refresh_error,omitempty"`
	Capabilities  []doctorJSONLine `json:"capabilities"`
	Warnings      []string         `json:"warnings"`
}

type doctorJSONLine struct {
	Capability string `json:"capability"`
	Value      string `json:"value"`
	Warn       bool   `json:"warn"`
	Why        string `json:"why"`
}

func writeDoctorJSON(w io.Writer, r doctor.Report, shown string) error {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	out := doctorJSON{Backend: shown, Name: r.Name, RTTMS: ms(r.RTT), Rounds: r.Rounds, ClockKnown: r.ClockKnown,
		KillMode: r.KillMode, KillModeWhy: r.KillModeWhy, Capabilities: []doctorJSONLine{}, Warnings: r.Warnings()}
	if out.Warnings == nil {
		out.Warnings = []string{}
	}
	if r.ClockKnown {
		off, bound := ms(r.Offset), ms(r.OffsetBound)
		out.OffsetMS, out.OffsetBoundMS = &off, &bound
	}
	if !r.ReadAt.IsZero() {
		out.ReadAt = r.ReadAt.UTC().Format(time.RFC3339Nano)
	}
	if r.ExplainErr != nil {
		out.ExplainError = r.ExplainErr.Error()
	}
	if r.RefreshErr != nil {
		out.RefreshError = r.RefreshErr.Error()
	}
	for _, l := range r.Lines {
		out.Capabilities = append(out.Capabilities, doctorJSONLine{l.Capability, l.Value, l.Warn, l.Why})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
