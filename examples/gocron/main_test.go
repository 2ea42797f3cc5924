package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGocronOncePerOccurrence runs the program for 4 seconds: occurrences
// ran, and none on more than one scheduler.
func TestGocronOncePerOccurrence(t *testing.T) {
	var out bytes.Buffer
	ran, err := run(context.Background(), &out, filepath.Join(t.TempDir(), "l.db"), 4*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(ran) < 2 {
		t.Fatalf("%d occurrences ran in 4 s; want at least 2:\n%s", len(ran), out.String())
	}
	for sec, on := range ran {
		if len(on) != 1 {
			t.Errorf("second %d ran on %v", sec, on)
		}
	}
	if !strings.Contains(out.String(), " run more than once\n") || !strings.Contains(out.String(), ", 0 run more than once") {
		t.Errorf("output does not report 0 duplicates:\n%s", out.String())
	}
}
