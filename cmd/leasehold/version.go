package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module and Go versions (also: leasehold --version)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := versionText()
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(a.stdout, v)
			return err
		},
	}
}

// versionText is what "leasehold version" and "leasehold --version"
// print: the module, its version and Go's, and the VCS revision.
func versionText() (string, error) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "", fmt.Errorf("no build information in this binary")
	}
	version := bi.Main.Version
	if version == "" {
		version = "(unknown)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "leasehold %s %s %s\n", bi.Main.Path, version, bi.GoVersion)
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
		fmt.Fprintf(&b, "revision %s\n", rev)
	}
	return b.String(), nil
}
