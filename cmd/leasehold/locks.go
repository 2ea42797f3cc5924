package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/daemon/admin"
)

// lockInfo is one row of "leasehold locks".
type lockInfo struct {
	Key         string          `json:"key"`
	Kind        string          `json:"kind"` // "lock", or "instance" for a daemon's own instance lease
	Instance    string          `json:"instance"`
	Process     string          `json:"process,omitempty"` // a daemon's instance lock: its process, host:pid:start ticks:boot id
	Token       leasehold.Token `json:"token"`             // a JSON string
	Remaining   string          `json:"remaining"`
	RemainingMS int64           `json:"remaining_ms"`
}

func newLocksCmd(a *app) *cobra.Command {
	var asJSON bool
	var config string
	cmd := &cobra.Command{
		Use:   "locks [--config leasehold.yaml]",
		Short: "List the held locks of the namespace",
		Long: `List the locks of the namespace that are held now: key, holder instance,
fencing token and the time left on the lease by the backend's clock (for
people; it is never a basis for safety decisions). KIND tells the locks of
users ("lock") from the leases running daemons hold on their instance ids
("instance", keys instances/<id>).

With --json, print a JSON array of objects with the fields key, kind, instance,
process (for a daemon's instance lease: its process, host:pid:start
ticks:boot id), token (a decimal string: JSON numbers cannot hold every
uint64), remaining
(a Go duration) and remaining_ms.

` + targetHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			b, ns, err := a.openTarget(ctx, cmd, config)
			if err != nil {
				return err
			}
			defer b.Close()
			prefix := leasehold.LockPrefix(ns)
			leases, err := b.List(ctx, prefix, 0)
			if err != nil {
				return fmt.Errorf("list locks of namespace %q: %w", ns, err)
			}
			rows := make([]lockInfo, 0, len(leases))
			for _, l := range leases {
				key := strings.TrimPrefix(l.Key, prefix)
				instance, process := holder(key, l.Owner.Instance)
				rows = append(rows, lockInfo{
					Key:         key,
					Kind:        lockKind(key),
					Instance:    instance,
					Process:     process,
					Token:       leasehold.Token(l.Token),
					Remaining:   roundRemaining(l.Remaining).String(),
					RemainingMS: l.Remaining.Milliseconds(),
				})
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tKIND\tINSTANCE\tTOKEN\tREMAINING")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cell(r.Key), r.Kind, cell(r.Instance), r.Token, r.Remaining)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&config, "config", "", configFlagHelp)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// holder splits the owner of a daemon's instance lock, held under
// "<instance>@<process>", into the two, as the admin API and "leasehold
// status" show them; any other lock's owner is its instance as given.
func holder(key, owner string) (instance, process string) {
	if lockKind(key) == admin.LockKindInstance {
		if name, proc, ok := strings.Cut(owner, "@"); ok {
			return name, proc
		}
	}
	return owner, ""
}

// lockKind is "instance" for the lease a daemon holds on its instance id
// (daemon: "instances/<id>"), "lock" for any other key.
func lockKind(key string) string {
	if strings.HasPrefix(key, "instances/") {
		return admin.LockKindInstance
	}
	return admin.LockKindUser
}

// roundRemaining rounds a remaining lease time for people.
func roundRemaining(d time.Duration) time.Duration {
	switch {
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d < time.Hour:
		return d.Round(time.Second)
	default:
		return d.Round(time.Minute)
	}
}
