package checker

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/internal/chaos/harness"
)

// unpackKept copies the kept run in testdata/name to a temporary directory,
// gunzipping its histories, as its README says to before judging it.
func unpackKept(t *testing.T, name string) string {
	t.Helper()
	src, dst := filepath.Join("testdata", name), t.TempDir()
	raw, err := os.ReadFile(filepath.Join(src, harness.RunFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, harness.RunFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{harness.HistoryFile, harness.SinkFile, harness.UnfencedFile} {
		in, err := os.Open(filepath.Join(src, f+".gz"))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(in)
		if err != nil {
			in.Close()
			t.Fatalf("%s.gz: %v", f, err)
		}
		out, err := os.Create(filepath.Join(dst, f))
		if err == nil {
			_, err = io.Copy(out, zr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
		}
		in.Close()
		if err != nil {
			t.Fatalf("unpack %s: %v", f, err)
		}
	}
	return dst
}

// TestKeptZooKeeperHistoryIsNotLinearizable: the TestChaos/zookeeper run
// kept in testdata/zookeeper-nonlinearizable (an Acquire answered OK for a
// node the backend's own cleanup had deleted, so two owners were granted
// the key) must stay judged not linearizable — a checker that stops
// flagging it has lost the check that found the bug.
func TestKeptZooKeeperHistoryIsNotLinearizable(t *testing.T) {
	r, err := Check(unpackKept(t, "zookeeper-nonlinearizable"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Linearizable != string(porcupine.Illegal) {
		t.Fatalf("the kept zookeeper history judged %q, want %q (lease ops %d)\n%s",
			r.Linearizable, porcupine.Illegal, r.LeaseOps, r.Summary())
	}
	if r.HeldAnswersOnly {
		t.Fatalf("the kept zookeeper history is linearizable once Held answers are set aside; its fault was two grants:\n%s", r.Summary())
	}
}
