package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

// longPath is a valid path of n bytes: 128-byte segments joined by '/'.
func longPath(n int) string {
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		seg := min(128, n-b.Len())
		b.WriteString(strings.Repeat("a", seg))
	}
	return b.String()
}

// TestCombinedKeyLengthCheckedAtLoad (issue 18 item 7): a namespace and a
// job name that each pass validation but whose backend keys are longer
// than backend.MaxKeyLen are refused when the config is loaded, naming the
// field, the value's length and the limit — not at every occurrence.
func TestCombinedKeyLengthCheckedAtLoad(t *testing.T) {
	ns, job := longPath(250), longPath(256)
	yml := "namespace: " + ns + "\njobs:\n  - name: " + job + "\n    schedule: \"@every 1s\"\n    command: {argv: [/bin/true]}\n"
	_, err := Parse("c.yaml", []byte(yml))
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "c.yaml:3: jobs[0].name") || !strings.Contains(err.Error(), "512") {
		t.Fatalf("Parse = %v, want ErrConfig at jobs[0].name naming the limit of 512 bytes", err)
	}
	// An instance id whose instance lease key is too long.
	_, err = Parse("c.yaml", []byte("namespace: "+ns+"\ninstance: "+longPath(256)+"\n"))
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "instance") {
		t.Fatalf("Parse with a long instance = %v, want ErrConfig naming instance", err)
	}
	// The longest accepted combination does run: its occurrence is claimed.
	short := longPath(backend.MaxKeyLen - len(ns) - 1 - len("!pause!") - len(ns))
	cfg, err := Parse("/tmp/c.yaml", []byte("namespace: "+ns+"\ninstance: i1\ngrace: 1s\nhttp: {listen: \"off\"}\njobs:\n  - name: "+short+"\n    schedule: \"@every 200ms\"\n    command: {argv: [/bin/true]}\n"))
	if err != nil {
		t.Fatalf("Parse of the longest job name accepted: %v", err)
	}
	b := memory.New()
	d, err := New(cfg, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	if !eventually.Within(20*time.Second, func() bool {
		var runs []backend.Run
		runs, err = schedule.NamespaceLedger(b, ns).ListRuns(context.Background(), backend.RunFilter{Job: short, State: backend.Succeeded, Limit: 1})
		return err == nil && len(runs) > 0
	}) {
		t.Fatalf("no succeeded run of the longest job name within 20 s (last error %v)", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
