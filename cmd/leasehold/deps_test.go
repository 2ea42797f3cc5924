package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestBinaryDoesNotLinkTesting: the shipped binary must not link package
// testing (the chaos harness once passed a fake testing.TB to the test
// servers, which pulled the test framework into leasehold).
func TestBinaryDoesNotLinkTesting(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	for _, goos := range []string{"linux", "darwin", "windows"} {
		cmd := exec.Command(goBin, "list", "-deps", ".")
		cmd.Env = append(cmd.Environ(), "GOOS="+goos)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("GOOS=%s go list -deps: %v", goos, err)
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, "github.com/leasehold/leasehold/internal/testserver") {
			t.Fatalf("GOOS=%s: go list -deps does not list internal/testserver, which leasehold chaos uses: is this the right package? (%d deps)", goos, len(deps))
		}
		for _, d := range deps {
			if d == "testing" || strings.HasPrefix(d, "testing/") {
				t.Errorf("GOOS=%s: leasehold links %s", goos, d)
			}
		}
	}
}
