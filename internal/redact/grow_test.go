package redact

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// A handler made before Grow masks the secrets Grow added: the daemon's
// logger is built once, and a config reload can bring new job secrets.
func TestGrowReachesExistingHolders(t *testing.T) {
	s := NewScrubber("old-secret")
	var buf bytes.Buffer
	log := slog.New(Handler(slog.NewTextHandler(&buf, nil), s))
	s.Grow("new-secret")
	log.Info("calling", "url", "https://u:new-secret@h/", "also", "old-secret")
	if out := buf.String(); strings.Contains(out, "new-secret") || strings.Contains(out, "old-secret") {
		t.Fatalf("a secret reached the log: %s", out)
	}
	if got := s.Text("new-secret old-secret"); got != Mask+" "+Mask {
		t.Fatalf("Text = %q", got)
	}
}
