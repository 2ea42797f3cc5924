package main

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/daemon/admin"
)

// TestStatusShowsTheClusterState: a daemon that runs a replaced version
// of a job that runs nowhere says both in "leasehold status", with the
// notes that say what to do — not "active" with a next run.
func TestStatusShowsTheClusterState(t *testing.T) {
	var out strings.Builder
	st := &admin.Status{Jobs: []admin.Job{{Name: "report", Schedule: "*/5 * * * *", Mode: "once", Next: []string{"2026-01-01T00:05:00Z"},
		State: admin.JobSuperseded, StateNote: "this daemon's schedule no longer applies; set a new `revision:`",
		Cluster: &admin.JobCluster{Version: "b", Running: false, Note: "NOT RUNNING ANYWHERE: version b"}}}}
	if err := printStatus(&out, st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"superseded, NOT RUNNING ANYWHERE", "job report: this daemon's schedule no longer applies; set a new `revision:`", "job report: NOT RUNNING ANYWHERE: version b"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "active") {
		t.Errorf("status says active:\n%s", out.String())
	}
}
