package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
)

// productBinary returns the leasehold binary the benchmarks run: --leasehold
// if given, else "leasehold" in this binary's directory, else one built
// into dir from this module's source (which works from a checkout, as
// "go run ./cmd/leasehold-lab" is run).
func (a *app) productBinary(ctx context.Context, dir string) (string, error) {
	if a.leaseholdBin != "" {
		if _, err := os.Stat(a.leaseholdBin); err != nil {
			return "", usageErrorf("--leasehold %q: %w", a.leaseholdBin, err)
		}
		return a.leaseholdBin, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding this binary: %w", err)
	}
	beside := filepath.Join(filepath.Dir(self), "leasehold")
	if st, err := os.Stat(beside); err == nil && st.Mode().IsRegular() {
		return beside, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok || bi.Main.Path == "" {
		return "", errors.New("no leasehold binary next to this one and no module to build it from: give --leasehold")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "leasehold")
	build := exec.CommandContext(ctx, "go", "build", "-o", out, bi.Main.Path+"/cmd/leasehold")
	if msg, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building leasehold (give --leasehold to use a built one): go build %s/cmd/leasehold: %w\n%s", bi.Main.Path, err, msg)
	}
	return out, nil
}
