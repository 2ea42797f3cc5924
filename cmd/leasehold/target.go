package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/backend"
)

// configFlagHelp is the help of the read commands' --config flag.
const configFlagHelp = "the daemon's config `file`: read its backend and namespace (--backend and --namespace still override)"

// targetHelp says where the read commands take their backend and namespace
// from; it ends their Long help.
const targetHelp = `The backend and namespace are, first that applies: --backend and
--namespace; with --config, the daemon config's backend and namespace (its
default SQLite file next to it when it names none); $LEASEHOLD_BACKEND and
the default namespace; the default SQLite file.`

// openTarget opens the backend a read command reads and returns it with
// the namespace: the daemon config's when --config is given (path not
// ""), with --backend and --namespace overriding it; else the command
// line's (or the default).
func (a *app) openTarget(ctx context.Context, cmd *cobra.Command, path string) (backend.Leases, string, error) {
	if path == "" {
		b, err := a.openBackend(ctx)
		return b, a.namespace, err
	}
	cfg, err := a.loadConfig(cmd, path)
	if err != nil {
		return nil, "", err
	}
	b, err := a.openURL(ctx, cfg.Backend)
	return b, cfg.Namespace, err
}
