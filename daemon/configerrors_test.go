package daemon

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/schedule"
)

// TestConfigMisfireFields: misfire_window and max_catch_up reach the job.
func TestConfigMisfireFields(t *testing.T) {
	c, err := Parse("c.yaml", []byte("jobs:\n  - name: r\n    schedule: \"@hourly\"\n    misfire: run-all\n    misfire_window: 6h\n    misfire_grace: 30s\n    max_catch_up: 4\n    revision: 2\n    command: {argv: [x]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.Jobs[0].job(nil, time.Duration(c.Retention))
	if err != nil {
		t.Fatal(err)
	}
	if j.Misfire != schedule.MisfireRunAll || j.MisfireWindow != 6*time.Hour || j.MisfireGrace != 30*time.Second || j.MaxCatchUp != 4 || j.Revision != 2 {
		t.Fatalf("job %+v", j)
	}
}

// TestConfigErrorsEachOnItsLine: every error of a config is reported, each
// on its own line naming file:line and its own field — not a field whose
// name happens to appear in the message (a job called "mode-report").
func TestConfigErrorsEachOnItsLine(t *testing.T) {
	yaml := `retention: 3h
grace: -1s
jobs:
  - name: mode-report
    schedule: "@daily"
    timeout: -5s
    command: {argv: [x]}
  - name: b
    schedule: "@daily"
    jitter: soon
    misfire_window: 4h
    command: {argv: [x]}
  - name: c
    schedule: "61 * * * *"
    zone: Mars/Base
    max_catch_up: -1
    lease_ttl: forever
    http: {url: "ftp://h/x"}
log:
  level: loud
`
	_, err := Parse("c.yaml", []byte(yaml))
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("Parse = %v, want ErrConfig", err)
	}
	want := []string{
		"c.yaml:2: grace: -1s is negative",
		"c.yaml:6: jobs[0].timeout: ",
		`c.yaml:10: jobs[1].jitter: value "soon" is not a duration`,
		"c.yaml:11: jobs[1].misfire_window: ",
		`c.yaml:14: jobs[2].schedule: `,
		`c.yaml:15: jobs[2].zone: `,
		"c.yaml:16: jobs[2].max_catch_up: ",
		`c.yaml:17: jobs[2].lease_ttl: value "forever" is not a duration`,
		`c.yaml:18: jobs[2].http.url: `,
		"c.yaml:20: log.level: ",
	}
	lines := strings.Split(err.Error(), "\n")
	for i := 1; i < len(lines); i++ { // in the order of the file
		if lineNo(lines[i]) < lineNo(lines[i-1]) {
			t.Errorf("line %d comes after line %d:\n%s", lineNo(lines[i]), lineNo(lines[i-1]), err)
		}
	}
	for _, w := range want {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, w) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d lines contain %q, want 1", n, w)
		}
	}
	if len(lines) != len(want) {
		t.Errorf("%d error lines, want %d:\n%s", len(lines), len(want), err)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "leasehold/daemon: invalid config: c.yaml:") {
			t.Errorf("line %q does not start with the file", l)
		}
		if strings.Contains(l, "jobs[0].mode") {
			t.Errorf("line %q blames mode for the job named mode-report", l)
		}
	}
}

// TestConfigErrorsInFlowMappings: two bad durations on one line are told
// apart by their field.
func TestConfigErrorsInFlowMappings(t *testing.T) {
	_, err := Parse("c.yaml", []byte("jobs:\n  - {name: r, schedule: \"@daily\", timeout: soon, jitter: later, command: {argv: [x]}}\n"))
	for _, w := range []string{`c.yaml:2: jobs[0].timeout: value "soon"`, `c.yaml:2: jobs[0].jitter: value "later"`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Parse = %v, want an error line containing %q", err, w)
		}
	}
}

// lineNo returns N of "…c.yaml:N: …".
func lineNo(msg string) int {
	_, rest, _ := strings.Cut(msg, "c.yaml:")
	n, _ := strconv.Atoi(strings.SplitN(rest, ":", 2)[0])
	return n
}
