package daemon

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const good = `
instance: web-1
namespace: prod/billing
grace: 10s
jobs:
  - name: report
    schedule: "30 2 * * *"
    zone: Europe/Paris
    command:
      argv: [/usr/bin/send-report, --daily]
      env: {MODE: full}
  - name: ping
    schedule: "@every 30s"
    crash: skip
    http:
      method: POST
      url: http://127.0.0.1:8080/ping
      expect: 204
`

func TestParseGood(t *testing.T) {
	c, err := Parse("/etc/leasehold/leasehold.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if c.Instance != "web-1" || len(c.Jobs) != 2 || time.Duration(c.Grace) != 10*time.Second ||
		c.Backend != "sqlite:///etc/leasehold/leasehold.db" || c.Jobs[1].HTTP.Expect != 204 {
		t.Fatalf("parsed %+v", c)
	}
}

func TestConfigErrorsNameFileLineFieldValue(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"instance: a\njobs:\n  - name: r\n    schedule: \"61 * * * *\"\n    command: {argv: [x]}\n", `c.yaml:4: jobs[0].schedule: job "r": leasehold/schedule: invalid schedule: schedule "61 * * * *"`},
		{"jobs:\n  - name: r\n    schedule: \"@daily\"\n    zone: Mars/Base\n    command: {argv: [x]}\n", `c.yaml:4: jobs[0].zone:`},
		{"jobs:\n  - name: r\n    schedule: \"@daily\"\n    timeout: soon\n", `c.yaml:4: jobs[0].timeout: value "soon" is not a duration`},
		{"jobs:\n  - name: r\n    schedul: \"@daily\"\n", `c.yaml:3: jobs[0].schedul: unknown field "schedul" (did you mean "schedule"?)`},
		{"jobs:\n  - name: r\n    schedule: \"@daily\"\n", `c.yaml:2: jobs[0]: job "r" needs exactly one of command or http`},
		{"jobs:\n  - name: r\n    schedule: \"@daily\"\n    command: {argv: []}\n", `c.yaml:4: jobs[0].command.argv`},
		{"jobs:\n  - name: r\n    schedule: \"@daily\"\n    http: {url: \"ftp://user:secret@h/x\"}\n", `"ftp://user:xxxxx@h/x" is not an http(s) URL`},
		{"jobs:\n  - name: r\n    schedule: \"@daily\"\n    mode: sometimes\n    command: {argv: [x]}\n", `c.yaml:4: jobs[0].mode: leasehold/backend: invalid argument: job "r": mode "sometimes"`},
		{"jobs:\n  - {name: r, schedule: \"@daily\", command: {argv: [x]}}\n  - {name: r, schedule: \"@daily\", command: {argv: [x]}}\n", `c.yaml:3: jobs[1].name: "r" is also the name of jobs[0]`},
		{"namespace: a//b\n", `c.yaml:1: namespace: "a//b"`},
		{"grace: -1s\n", `c.yaml:1: grace: -1s is negative`},
		{"", `c.yaml:0: file is empty`},
		{"jobs: [", `c.yaml:1:`},
	}
	for _, c := range cases {
		_, err := Parse("c.yaml", []byte(c.yaml))
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q)\n  = %v\n want ErrConfig containing %q", c.yaml, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("error leaks a password: %v", err)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "none.yaml"))
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "none.yaml") {
		t.Fatalf("Load of a missing file = %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte("jobs:\n  - name: r\n    schedule: \"@daily\"\n    command: {argv: [x]}\n"))
	f.Add([]byte("backend: redis://u:p@h/0\ninstance: i\n"))
	f.Add([]byte("grace: -1s\njobs:\n  - {name: a, schedule: \"61 * * * *\", timeout: soon, misfire_window: 2h, max_catch_up: -3, command: {argv: [x]}}\n  - name: a\n    jitter: x\n"))
	f.Add([]byte("jobs:\n  - name: mode-report\n    schedule: \"@daily\"\n    timeout: -1s\n    lease_ttl: 1ms\n    http: {url: x}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("f.yaml", data)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
			// Every error is on a line of its own and names the file.
			errs := []error{err}
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			}
			for _, e := range errs {
				if !errors.Is(e, ErrConfig) || strings.Contains(e.Error(), "\n") || !strings.HasPrefix(e.Error(), ErrConfig.Error()+": f.yaml:") {
					t.Fatalf("error %q of %q: not one line wrapping ErrConfig and naming the file", e, err)
				}
			}
			return
		}
		if c.Instance == "" || c.Namespace == "" || c.Backend == "" {
			t.Fatalf("accepted config without defaults: %+v", c)
		}
	})
}
