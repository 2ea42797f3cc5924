package schedule

import (
	"errors"
	"sort"
	"strings"
	"testing"
	"time"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

// seq returns the n instants after from.
func seq(t *testing.T, s *Spec, from time.Time, n int) []string {
	t.Helper()
	var out []string
	for range n {
		from = s.Next(from)
		out = append(out, from.Format(time.RFC3339Nano))
	}
	return out
}

func TestDST(t *testing.T) {
	cases := []struct {
		name, spec, zone, from string
		want                   []string
	}{
		{"New York spring forward: skipped 02:30 runs once at 03:00 EDT", "30 2 * * *", "America/New_York", "2026-03-07T00:00:00Z",
			[]string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		{"New York fall back: repeated 01:30 runs once", "30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"New York fall back: hourly runs in both repeated hours", "0 * * * *", "America/New_York", "2026-11-01T03:30:00Z",
			[]string{"2026-11-01T04:00:00Z", "2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"}},
		{"New York spring forward: hourly skips nothing and doubles nothing", "0 * * * *", "America/New_York", "2026-03-08T05:30:00Z",
			[]string{"2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"}},
		{"London spring forward", "30 1 * * *", "Europe/London", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"London fall back", "30 1 * * *", "Europe/London", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"Sydney fall back (April)", "30 2 * * *", "Australia/Sydney", "2026-04-04T00:00:00Z",
			[]string{"2026-04-04T15:30:00Z", "2026-04-05T16:30:00Z"}},
		{"Sydney spring forward (October)", "30 2 * * *", "Australia/Sydney", "2026-10-02T20:00:00Z",
			[]string{"2026-10-02T16:30:00Z", "2026-10-03T16:00:00Z", "2026-10-04T15:30:00Z"}[1:]},
		{"Lord Howe half-hour shift", "15 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00Z",
			[]string{"2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"}},
		{"UTC daily", "@daily", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"}},
		{"CRON_TZ prefix", "CRON_TZ=Asia/Tokyo 0 9 * * *", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"}},
		{"seconds field", "*/20 * * * * *", "", "2026-01-01T00:00:05Z",
			[]string{"2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse(c.spec, c.zone)
			if err != nil {
				t.Fatal(err)
			}
			got := seq(t, s, utc(c.from), len(c.want))
			if strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Fatalf("got  %v\nwant %v", got, c.want)
			}
		})
	}
}

func TestEveryIsAnchoredToTheEpoch(t *testing.T) {
	s, err := Parse("@every 1500ms", "Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	// Two instances started 700 ms apart compute the same instants.
	a := seq(t, s, utc("2026-05-01T10:00:00Z").Add(100*time.Millisecond), 5)
	b := seq(t, s, utc("2026-05-01T10:00:00Z").Add(1200*time.Millisecond), 4)
	if strings.Join(a[:4], " ") != strings.Join(b, " ") || a[0] != "2026-05-01T10:00:01.5Z" {
		t.Fatalf("instances disagree:\n%v\n%v", a, b)
	}
	if n := s.Next(utc("2026-05-01T10:00:00Z")); n.UnixMilli()%1500 != 0 {
		t.Fatalf("instant %v is not a multiple of 1500 ms since the epoch", n)
	}
}

func TestNextIsStrictlyAfterAndMillisecondUTC(t *testing.T) {
	for _, spec := range []string{"* * * * * *", "@every 250ms", "0 0 29 2 *", "30 2 * * *"} {
		s, err := Parse(spec, "America/New_York")
		if err != nil {
			t.Fatal(err)
		}
		at := utc("2026-03-08T06:59:59Z").Add(123456789)
		for range 50 {
			n := s.Next(at)
			if n.IsZero() { // nothing within five years (Feb 29 after 2096)
				break
			}
			if !n.After(at) || n.Location() != time.UTC || n.Nanosecond()%int(time.Millisecond) != 0 {
				t.Fatalf("%s: Next(%v) = %v", spec, at, n)
			}
			at = n
		}
	}
}

func TestParseErrorsNameTheValue(t *testing.T) {
	cases := map[[2]string]string{
		{"", ""}:                                "empty",
		{"61 * * * *", ""}:                      `"61 * * * *"`,
		{"* * * *", ""}:                         `"* * * *"`,
		{"0 9 * * *", "Mars/Olympus"}:           `"Mars/Olympus"`,
		{"0 9 * * *", "Local"}:                  `"Local"`,
		{"CRON_TZ=Asia/Tokyo 0 9 * * *", "UTC"}: `"Asia/Tokyo"`,
		{"@every 5ms", ""}:                      "shorter than",
		{"@every 10500us", ""}:                  "whole number of milliseconds",
		{"@every soon", ""}:                     `"@every soon"`,
		{"0 0 30 2 *", ""}:                      "never fires",
		{strings.Repeat("1 ", 200), ""}:         "longer than 256",
	}
	for in, want := range cases {
		_, err := Parse(in[0], in[1])
		if !errors.Is(err, ErrSpecInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%.30q, %q) = %v, want ErrInvalidSpec containing %q", in[0], in[1], err, want)
		}
	}
}

func TestVersion(t *testing.T) {
	a, _ := Parse("30 2 * * *", "Europe/Paris")
	b, _ := Parse("CRON_TZ=Europe/Paris 30 2 * * *", "")
	c, _ := Parse("30 2 * * *", "Europe/Berlin")
	if a.Version() != b.Version() || a.Version() == c.Version() || len(a.Version()) != 16 {
		t.Fatalf("versions %s %s %s", a.Version(), b.Version(), c.Version())
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"30 2 * * *", "*/5 * * * * *", "@every 1s", "@daily", "CRON_TZ=Europe/Paris 0 9 * * 1-5", "0 0 29 2 *", "TZ=Asia/Kolkata 15 3 * * *"} {
		f.Add(s, "America/New_York")
		f.Add(s, "")
	}
	f.Fuzz(func(t *testing.T, spec, zone string) {
		s, err := Parse(spec, zone)
		if err != nil {
			if !errors.Is(err, ErrSpecInvalid) {
				t.Fatalf("Parse(%q, %q) error %v does not wrap ErrInvalidSpec", spec, zone, err)
			}
			return
		}
		at := time.Date(2026, 3, 8, 6, 0, 0, 0, time.UTC)
		for range 3 {
			n := s.Next(at)
			if n.IsZero() {
				return
			}
			if !n.After(at) {
				t.Fatalf("Parse(%q, %q).Next(%v) = %v, not after", spec, zone, at, n)
			}
			at = n
		}
	})
}

// TestNextAgreesWithBruteForce compares Next (fast path and walk) with an
// exhaustive enumeration of civil seconds around both DST changes of 2026.
func TestNextAgreesWithBruteForce(t *testing.T) {
	for _, zone := range []string{"America/New_York", "Australia/Lord_Howe", "Europe/London", ""} {
		for _, spec := range []string{"30 2 * * *", "0 * * * *", "*/7 15 1-3 * * *", "0 30 1 * * 0"} {
			s, err := Parse(spec, zone)
			if err != nil {
				t.Fatal(err)
			}
			// Around both 2026 transitions of the zone (or any days for UTC).
			for _, day := range []string{"2026-03-07T00:00:00Z", "2026-03-28T00:00:00Z", "2026-10-03T00:00:00Z", "2026-10-31T00:00:00Z"} {
				from := utc(day)
				want := bruteForce(s, from, 30)
				got := seq(t, s, from, len(want))
				if len(want) == 0 || strings.Join(got, " ") != strings.Join(want, " ") {
					t.Fatalf("%s in %q from %s:\n got  %v\n want %v", spec, zone, day, got, want)
				}
			}
		}
	}
}

// bruteForce lists the first n instants after from by enumerating every
// civil match in an 80 h window and mapping each to instants by the DST
// rules (instants), without Next's windowing or fast path.
func bruteForce(s *Spec, from time.Time, n int) []string {
	var all []time.Time
	start := civil(from, s.zone).Add(-maxShift).Truncate(time.Second)
	// robfig's Next, on UTC (no DST), is the civil-time matcher; every match
	// in the window is mapped and the instants are sorted globally.
	for c := s.cron.Next(start.Add(-time.Second)); !c.IsZero() && c.Before(start.Add(80*time.Hour)); c = s.cron.Next(c) {
		for _, inst := range s.instants(c) {
			if inst.After(from) {
				all = append(all, inst)
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Before(all[j]) })
	var out []string
	for i, t := range all {
		if i > 0 && t.Equal(all[i-1]) {
			continue
		}
		if len(out) == n {
			break
		}
		out = append(out, t.Format(time.RFC3339Nano))
	}
	return out
}

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

// TestVersionCanonical: equivalent specs hash alike, different ones do
// not, and a zoned spec's version changes with the tzdata release.
func TestVersionCanonical(t *testing.T) {
	ver := func(spec, zone string) string {
		t.Helper()
		s, err := Parse(spec, zone)
		if err != nil {
			t.Fatal(err)
		}
		return s.Version()
	}
	alike := [][2]string{
		{"30 2 * * *", "0 30 2 * * *"},
		{"30 2 * * *", "  30   2 *\t* *  "},
		{"@daily", "0 0 * * *"},
		{"@hourly", "0 * * * *"},
		{"0 9 * * MON-FRI", "0 9 * * 1-5"},
		{"@every 60s", "@every 1m"},
	}
	for _, p := range alike {
		if a, b := ver(p[0], "Europe/Paris"), ver(p[1], "Europe/Paris"); a != b {
			t.Errorf("%q and %q are equivalent but hash to %s and %s", p[0], p[1], a, b)
		}
	}
	differ := [][2]string{
		{"30 2 * * *", "31 2 * * *"},
		{"0 0 * * *", "0 0 * * 0-6"}, // robfig: a restricted weekday field changes the day-of-month rule
		{"@every 1m", "@every 61s"},
		{"* * * * *", "*/2 * * * *"},
	}
	for _, p := range differ {
		if a, b := ver(p[0], ""), ver(p[1], ""); a == b {
			t.Errorf("%q and %q differ but both hash to %s", p[0], p[1], a)
		}
	}
	paris, _ := Parse("30 2 * * *", "Europe/Paris")
	if a, b := specVersion(paris.canon, "Europe/Paris", TZDataVersion), specVersion(paris.canon, "Europe/Paris", "1999z"); a == b || a != paris.Version() {
		t.Errorf("a zoned spec's version must follow the tzdata release: %s (%s) vs %s (1999z), Version() = %s", a, TZDataVersion, b, paris.Version())
	}
	if a, b := specVersion(paris.canon, "UTC", TZDataVersion), specVersion(paris.canon, "UTC", "1999z"); a != b {
		t.Errorf("a UTC spec's version must not depend on the tzdata release: %s vs %s", a, b)
	}
}
