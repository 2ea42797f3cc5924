package redact

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:pw1234@h:5432/db?password=secret1&sslmode=disable": "postgres://u:xxxxx@h:5432/db?password=xxxxx&sslmode=disable",
		"https://h/x?api_key=k123&x=1&access_token=t456":                 "https://h/x?api_key=xxxxx&x=1&access_token=xxxxx",
		"http://h/x?Signature=abcd&X-Amz-Credential=c":                   "http://h/x?Signature=xxxxx&X-Amz-Credential=xxxxx",
		"http://h/plain?page=2":                                          "http://h/plain?page=2",
		"not a url password=hunter22 ok":                                 "not a url password=xxxxx ok",
		// A raw password that breaks the parse (invalid port ":hunter2").
		"postgres://u:hunter2#x@h/db":   "postgres://u:xxxxx@h/db",
		"mysql://u:hunter2?x@h:3306/db": "mysql://u:xxxxx@h:3306/db",
		"redis://:hunter2/x@h:6379/0":   "redis://:xxxxx@h:6379/0",
	} {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestScrubberAndHandler(t *testing.T) {
	s := NewScrubber(Secrets("postgres://u:p%40ss1@h/db?password=secret%2F1")...)
	if got := s.Text("a p@ss1 b p%40ss1 c secret/1 d secret%2F1"); strings.Contains(got, "ss1") || strings.Contains(got, "secret") {
		t.Fatalf("Text = %q", got)
	}
	var buf bytes.Buffer
	log := slog.New(Handler(slog.NewTextHandler(&buf, nil), s)).With("backend", "x p@ss1")
	log.Info("dial secret/1", "err", errors.New("failed: p@ss1"), "n", 3)
	if out := buf.String(); strings.Contains(out, "ss1") || strings.Contains(out, "secret/1") || !strings.Contains(out, "n=3") {
		t.Fatalf("log = %q", out)
	}
	base := errors.New("wrapped secret/1")
	if err := Error(base, s); !errors.Is(err, base) || strings.Contains(err.Error(), "secret/1") {
		t.Fatalf("Error = %v", err)
	}
}

func TestText(t *testing.T) {
	in := `redis: bad "redis://u:pw99@h:1/0?password=abc123&x=1" and postgres url postgres://h/db?sslpassword=zz99`
	want := `redis: bad "redis://u:xxxxx@h:1/0?password=xxxxx&x=1" and postgres url postgres://h/db?sslpassword=xxxxx`
	if got := Text(in); got != want {
		t.Fatalf("Text =\n %q\nwant\n %q", got, want)
	}
}
