package schedule_test

import (
	"testing"

	"github.com/leasehold/leasehold/schedule"
)

// TestTwoZonePrefixesConflict: Parse refuses a spec whose CRON_TZ=
// and the job's zone disagree, but "TZ=A CRON_TZ=B spec" passes the inner
// CRON_TZ=B to robfig, which loads B from the host's zoneinfo (the very
// thing zones.go promises never to read), and then the zone is dropped:
// the spec runs in A with A's version, B silently ignored. A bad B is
// refused or not depending on the host's zone files.
func TestTwoZonePrefixesConflict(t *testing.T) {
	s, err := schedule.Parse("TZ=America/New_York CRON_TZ=Asia/Tokyo 0 9 * * *", "")
	if err == nil {
		ny, _ := schedule.Parse("0 9 * * *", "America/New_York")
		t.Fatalf("two different zone prefixes accepted: zone %v, version %s (== plain New York: %v); Asia/Tokyo silently ignored",
			s.Zone(), s.Version(), s.Version() == ny.Version())
	}
}
