package daemon

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/schedule"
)

var run = schedule.Run{Job: "report", ScheduledAt: time.Date(2026, 11, 30, 2, 30, 0, 0, time.UTC), Attempt: 2, Token: leasehold.Token(42), Instance: "web-1"}

func TestCommandEnvAndExitCode(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	j := &JobConfig{Name: "report", Command: &CommandJob{
		Argv: []string{"sh", "-c", `echo "$LEASEHOLD_JOB $LEASEHOLD_SCHEDULED_AT $LEASEHOLD_TOKEN $LEASEHOLD_ATTEMPT $LEASEHOLD_INSTANCE $EXTRA" > "$OUT"; exit 3`},
		Env:  map[string]string{"EXTRA": "x", "OUT": out}}}
	err := commandFunc(j, "web-1", nil, nil)(context.Background(), run)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("err = %v, want exit status 3", err)
	}
	b, _ := os.ReadFile(out)
	if got := strings.TrimSpace(string(b)); got != "report 2026-11-30T02:30:00.000Z 42 2 web-1 x" {
		t.Fatalf("the command saw %q", got)
	}
}

func TestCommandKilledOnCancel(t *testing.T) {
	j := &JobConfig{Name: "hang", Command: &CommandJob{Argv: []string{"sleep", "60"}}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- commandFunc(j, "i", nil, nil)(ctx, run) }()
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "stopped") {
			t.Fatalf("err = %v", err)
		}
	case <-time.After(killGrace + 5*time.Second):
		t.Fatal("command not stopped after its context ended")
	}
}

func TestCappedOutput(t *testing.T) {
	for _, c := range []struct {
		name   string
		max    int
		writes []string
		want   string
	}{
		{"fits", 16, []string{"hello ", "world"}, "hello world"},
		{"head and tail", 10, []string{"hello world", "!! the end"}, "hello" + backend.CutMarker(11) + "e end"},
		// head "aaa\xc3" and tail "\xa9abc" end and start inside an é
		{"no rune split at the cut", 8, []string{"aaaé", "xxxxxxxx", "éabc"}, "aaa" + backend.CutMarker(12) + "abc"},
		{"invalid bytes and NUL", 64, []string{"ok\xff\x00\n"}, "ok\uFFFD\uFFFD\n"},
		{"4095 a + é at the default cap", 4096, []string{strings.Repeat("a", 4095) + "é"},
			strings.Repeat("a", 2048) + backend.CutMarker(1) + strings.Repeat("a", 2046) + "é"},
	} {
		cp := &capped{max: c.max}
		for _, w := range c.writes {
			_, _ = cp.Write([]byte(w))
		}
		if got := cp.String(); got != c.want {
			t.Errorf("%s: capped = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestHTTPJobHeadersAndStatus(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	j := &JobConfig{Name: "ping", HTTP: &HTTPJob{Method: "POST", URL: srv.URL, Headers: map[string]string{"X-A": "b"}, Expect: 202}}
	if err := httpFunc(j, srv.Client(), nil, time.Minute)(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	if got.Get("Idempotency-Key") != "report@2026-11-30T02:30:00.000Z" || got.Get("Leasehold-Token") != "42" || got.Get("X-A") != "b" || got.Get("Leasehold-Attempt") != "2" {
		t.Fatalf("headers %v", got)
	}
	j.HTTP.Expect = 200
	if err := httpFunc(j, srv.Client(), nil, time.Minute)(context.Background(), run); err == nil || !strings.Contains(err.Error(), "202") {
		t.Fatalf("unexpected status not reported: %v", err)
	}
}
