package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/daemon/admin"
)

// TestVersionsPrintedEscaped (issue 27 item 8): a job's current version
// is read from the backend, which stores it unchecked; raw terminal
// escapes in it reached "leasehold status" and "leasehold jobs". Both
// print it escaped.
func TestVersionsPrintedEscaped(t *testing.T) {
	const evil = "v1\x1b]0;pwned\x07\x1b[2J"
	var out bytes.Buffer
	if err := printStatus(&out, &admin.Status{Jobs: []admin.Job{{Name: "j", VersionRefused: true, CurrentVersion: evil}}}); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(out.String(), "\x1b\x07") {
		t.Errorf("leasehold status printed a raw escape: %q", out.String())
	}
	for _, state := range []string{"unrecorded", "pending", "current", "refused", "new"} {
		got := versionCell(jobInfo{Version: evil, VersionState: state, CurrentVersion: evil, SwitchesAt: evil})
		if strings.ContainsAny(got, "\x1b\x07") {
			t.Errorf("leasehold jobs, version state %s, printed a raw escape: %q", state, got)
		}
	}
}
