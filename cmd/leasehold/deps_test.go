package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// labOnly are the packages of the lab (cmd/leasehold-lab): test servers,
// the chaos harness, its checker and history, the benchmark kit and the
// linearizability checker. The product binary links none of them.
var labOnly = []string{
	"github.com/leasehold/leasehold/internal/testkit/testserver",
	"github.com/leasehold/leasehold/internal/chaos",
	"github.com/leasehold/leasehold/cmd/leasehold-lab",
	"github.com/anishathalye/porcupine",
}

// testOnly is the home of the test-only helpers (test servers, waiting on
// a condition, a goroutine-safe buffer): the product binary links nothing
// under it.
const testOnly = "github.com/leasehold/leasehold/internal/testkit"

// TestBinaryLinksNoLab: the shipped binary must not link package testing
// (the chaos harness once passed a fake testing.TB to the test servers,
// which pulled the test framework into leasehold), any package of the lab
// (bench and chaos live in cmd/leasehold-lab), nor anything under
// internal/testkit.
func TestBinaryLinksNoLab(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	// The lab's own dependency list shows the names above are the right
	// ones: each of them is there.
	lab := goList(t, goBin, runtime.GOOS, "../leasehold-lab")
	for _, p := range labOnly {
		if !slices.ContainsFunc(lab, func(d string) bool { return under(d, p) }) {
			t.Fatalf("cmd/leasehold-lab does not link %s: is the list of lab packages out of date? (%d deps)", p, len(lab))
		}
	}
	for _, goos := range []string{"linux", "darwin", "windows"} {
		deps := goList(t, goBin, goos, ".")
		if !slices.Contains(deps, "github.com/leasehold/leasehold/backend/open") {
			t.Fatalf("GOOS=%s: go list -deps does not list backend/open: is this the right package? (%d deps)", goos, len(deps))
		}
		for _, d := range deps {
			if under(d, "testing") {
				t.Errorf("GOOS=%s: leasehold links %s", goos, d)
			}
			for _, p := range labOnly {
				if under(d, p) {
					t.Errorf("GOOS=%s: leasehold links %s, a package of the lab (cmd/leasehold-lab)", goos, d)
				}
			}
			if under(d, testOnly) {
				t.Errorf("GOOS=%s: leasehold links %s, a test-only package (internal/testkit)", goos, d)
			}
		}
	}
}

// under reports whether package path d is p or below it.
func under(d, p string) bool { return d == p || strings.HasPrefix(d, p+"/") }

// goList returns the dependencies of the package in dir, built for goos.
func goList(t *testing.T, goBin, goos, dir string) []string {
	t.Helper()
	cmd := exec.Command(goBin, "list", "-deps", dir)
	cmd.Env = append(cmd.Environ(), "GOOS="+goos)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("GOOS=%s go list -deps %s: %v", goos, dir, err)
	}
	return strings.Fields(string(out))
}
