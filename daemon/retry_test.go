package daemon

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/schedule"
)

const retryJob = `
jobs:
  - name: report
    schedule: "30 2 * * *"
    command: {argv: [/bin/true]}
`

// TestParseRetry (issue 15 item 9): a job's retry: {max, backoff,
// max_backoff} becomes its schedule.RetryPolicy, with the library's
// defaults for what is left out.
func TestParseRetry(t *testing.T) {
	c, err := Parse("/etc/l.yaml", []byte(retryJob+"    retry: {max: 4, backoff: 30s, max_backoff: 5m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	sj, err := c.Jobs[0].job(nil, time.Duration(c.Retention))
	if err != nil {
		t.Fatal(err)
	}
	if want := (schedule.RetryPolicy{Max: 4, Backoff: 30 * time.Second, MaxBackoff: 5 * time.Minute}); sj.Retry != want {
		t.Fatalf("retry policy %+v, want %+v", sj.Retry, want)
	}
}

// TestParseRetryInvalid: a bad retry section is refused with ErrConfig
// naming the file, the line, the field and the value.
func TestParseRetryInvalid(t *testing.T) {
	for _, c := range []struct{ retry, want string }{
		{"retry: {max: -2}", "/etc/l.yaml:6: jobs[0].retry.max: "},
		{"retry: {max: 2, backoff: -1s}", "/etc/l.yaml:6: jobs[0].retry.backoff: "},
		{"retry: {max: 2, backoff: 1m, max_backoff: 10s}", "/etc/l.yaml:6: jobs[0].retry.max_backoff: "},
		{"retry: {max: 2, backoff: 10 seconds}", `/etc/l.yaml:6: jobs[0].retry.backoff: value "10 seconds" is not a duration`},
		{"retry: {max: 2, tries: 3}", `/etc/l.yaml:6: jobs[0].retry.tries: unknown field "tries"; the fields here are max, backoff, max_backoff`},
		{"retry: {max: 5}\n    max_attempts: 2", "/etc/l.yaml:7: jobs[0].max_attempts: "},
		{"retry: {max: 5}\n    crash: skip", "/etc/l.yaml:6: jobs[0].retry.max: "},
	} {
		_, err := Parse("/etc/l.yaml", []byte(retryJob+"    "+c.retry+"\n"))
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrConfig containing %q", c.retry, err, c.want)
		}
	}
}
