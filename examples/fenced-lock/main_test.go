package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestFencedLock runs the program on a fresh SQLite file: the second
// holder's token is greater, and the first holder's late write is refused.
func TestFencedLock(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out, filepath.Join(t.TempDir(), "l.db")); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)worker-1 holds reports/daily with token (\d+)\nworker-1 writes: accepted\nworker-2 holds reports/daily with token (\d+)\nworker-2 writes: accepted\nworker-1 wakes and writes with token \d+: refused: token \d+ is older than \d+\nthe store holds: "report by worker-2"\n$`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("unexpected output:\n%s", out.String())
	}
	t1, _ := strconv.ParseUint(m[1], 10, 64)
	t2, _ := strconv.ParseUint(m[2], 10, 64)
	if t2 <= t1 {
		t.Fatalf("worker-2's token %d is not greater than worker-1's %d", t2, t1)
	}
}
