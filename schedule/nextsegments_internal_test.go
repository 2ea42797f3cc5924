package schedule

import (
	"testing"
	"time"
)

// transitionZones are zones with DST transitions (Lord Howe's shift is
// 30 minutes, Santiago's at midnight and in the southern summer), for
// the tests and the benchmark of Next near transitions.
var transitionZones = []string{"America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Santiago", "Europe/Paris"}

// transitions returns the zone's transitions in year (UTC instants).
func transitions(t testing.TB, loc *time.Location, year int) []time.Time {
	t.Helper()
	var out []time.Time
	at := time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC)
	for {
		_, end := at.In(loc).ZoneBounds()
		if end.IsZero() || end.Year() > year {
			return out
		}
		out = append(out, end)
		at = end
	}
}

// TestNextNearTransitionsMatchesTheWalk: near every 2026 transition of
// five zones, Next (nextBySegments) gives what walking civil times
// (nextByWalk, the slow reference) gives, for specs that fire every second,
// every minute, hourly, daily in the gap or overlap, and at midnight.
func TestNextNearTransitionsMatchesTheWalk(t *testing.T) {
	specs := map[string]time.Duration{ // spec: step between the instants checked
		"* * * * * *":   0, // the reference is slow for these: a few instants (near)
		"*/7 * * * * *": 0,
		// Every minute: its walk costs ~7 ms (360 matches in 6 h), so
		// 2,592 instants were 70% of the test (32 s under -race in CI); at
		// 29 min the grid still has instants 8 min before and 21 min after
		// each transition (inside a 30-min shift too: Lord Howe), and ±4 h
		// around it, each jiggled by the same sub-second offsets.
		"* * * * *":     29 * time.Minute,
		"15,45 * * * *": 9 * time.Minute,
		"0 * * * *":     9 * time.Minute,
		"30 2 * * *":    9 * time.Minute,
		"0 30 1 * * *":  9 * time.Minute,
		"0 0 * * *":     9 * time.Minute,
		"0 0 3 * * SUN": 9 * time.Minute,
		"5 4 1 * *":     9 * time.Minute,
	}
	near := []time.Duration{-time.Second, 40 * time.Minute}
	for _, zone := range transitionZones {
		for spec, step := range specs {
			sp, err := Parse(spec, zone)
			if err != nil {
				t.Fatal(err)
			}
			for _, tr := range transitions(t, sp.zone, 2026) {
				var ds []time.Duration
				for d := -4 * time.Hour; step > 0 && d <= 4*time.Hour; d += step {
					ds = append(ds, d)
				}
				if step == 0 {
					ds = near
				}
				for n, d := range ds {
					jiggles := []time.Duration{0, -time.Millisecond, 1234 * time.Millisecond, time.Duration(n+1) * 7919 * time.Millisecond}
					if step == 0 {
						jiggles = jiggles[3:]
					}
					for _, jiggle := range jiggles {
						at := tr.Add(d + jiggle)
						if got, want := sp.Next(at), sp.nextByWalk(at); !got.Equal(want) {
							t.Fatalf("%s in %s after %v: Next = %v, walk = %v", spec, zone, at, got, want)
						}
					}
				}
			}
		}
	}
}

// BenchmarkNextNearTransitions: Next of a per-second spec at instants
// spread over a year in five zones with transitions, and within an hour
// of each transition; the worst instant (ns) is reported as max-ns/op (the
// budget is 10 µs; a civil-time walk took 40–73 ms within 3 h of one).
func BenchmarkNextNearTransitions(b *testing.B) {
	for _, zone := range transitionZones {
		sp, err := Parse("* * * * * *", zone)
		if err != nil {
			b.Fatal(err)
		}
		var ats []time.Time
		for at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC); at.Year() == 2026; at = at.Add(time.Hour + 17*time.Second + 3*time.Millisecond) {
			ats = append(ats, at)
		}
		for _, tr := range transitions(b, sp.zone, 2026) {
			for d := -3 * time.Hour; d <= 3*time.Hour; d += 61 * time.Second {
				ats = append(ats, tr.Add(d))
			}
		}
		b.Run(zone, func(b *testing.B) {
			i := 0
			for b.Loop() {
				sp.Next(ats[i%len(ats)])
				i++
			}
			// The worst instant, each timed as the best of five runs (a
			// single run's time is mostly the machine's noise).
			var worst time.Duration
			for _, at := range ats {
				best := time.Hour
				for range 5 {
					t0 := time.Now()
					sp.Next(at)
					best = min(best, time.Since(t0))
				}
				worst = max(worst, best)
			}
			b.ReportMetric(float64(worst.Nanoseconds()), "max-ns/op")
		})
	}
}
