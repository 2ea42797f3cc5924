package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module and Go versions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			bi, ok := debug.ReadBuildInfo()
			if !ok {
				return fmt.Errorf("no build information in this binary")
			}
			version := bi.Main.Version
			if version == "" {
				version = "(unknown)"
			}
			fmt.Fprintf(a.stdout, "leasehold %s %s %s\n", bi.Main.Path, version, bi.GoVersion)
			var rev, modified string
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					modified = s.Value
				}
			}
			if rev != "" {
				if modified == "true" {
					rev += " (modified)"
				}
				fmt.Fprintf(a.stdout, "revision %s\n", rev)
			}
			return nil
		},
	}
}
