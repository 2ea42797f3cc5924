package daemon

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/doctor"
)

// TestRunLogsGuaranteeWarnings: at start the daemon logs every warning
// "leasehold doctor" gives for its backend (the memory backend: no durable
// fencing, one process only), before it is ready.
func TestRunLogsGuaranteeWarnings(t *testing.T) {
	cfg, err := Parse("/tmp/l.yaml", []byte(oneJob+"http: {listen: \"off\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := memory.New()
	defer b.Close()
	logs := &lockedBuffer{}
	d, err := New(cfg, b, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("daemon stopped: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("daemon not ready in 20s")
	}
	want := doctor.Warnings(context.Background(), b)
	if len(want) == 0 {
		t.Fatal("doctor gives no warnings for the memory backend")
	}
	got := logs.String()
	for _, w := range want {
		if !strings.Contains(got, "backend guarantee not given") || !strings.Contains(got, w) {
			t.Errorf("the start log lacks the warning %q:\n%s", w, got)
		}
	}
	if !strings.Contains(got, "MultiProcess no") {
		t.Errorf("the start log does not say the memory backend serves one process:\n%s", got)
	}
}
