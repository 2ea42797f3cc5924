package schedule_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/schedule"
)

// A job name with backend.MetaSep is the scheduler's metadata space: a
// ClaimOccurrence under such a name would make a run that no listing
// without a job shows (and "<job>!pause!<ns>" is a scheduler's pause
// record). It is refused, naming the value, and nothing is claimed.
func TestClaimOccurrenceRefusesReservedJobName(t *testing.T) {
	ctx := context.Background()
	b := memory.New()
	at := time.Now().Add(-time.Second)
	for _, name := range []string{"reports!daily", "nightly!pause!default", "gocron/a!b"} {
		c, err := schedule.ClaimOccurrence(ctx, b, name, at, schedule.ClaimOptions{Instance: "a"})
		if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), name) {
			if c != nil {
				_ = c.Finish(ctx, nil)
			}
			t.Fatalf("ClaimOccurrence(%q) = %v; want ErrInvalid naming the job", name, err)
		}
		if _, err := b.GetRun(ctx, name, at); !errors.Is(err, backend.ErrNotFound) {
			t.Fatalf("GetRun(%q) after a refused claim: %v; want ErrNotFound", name, err)
		}
	}
	// A name without it is claimed and listed.
	c, err := schedule.ClaimOccurrence(ctx, b, "reports/daily", at, schedule.ClaimOptions{Instance: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	runs, err := b.ListRuns(ctx, backend.RunFilter{})
	if err != nil || len(runs) != 1 || runs[0].Job != "reports/daily" {
		t.Fatalf("ListRuns = %+v, %v; want the one run of reports/daily", runs, err)
	}
}
