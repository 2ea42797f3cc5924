package schedule

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// MinEvery is the shortest @every interval.
const MinEvery = 10 * time.Millisecond

// parser accepts 5 fields, an optional leading seconds field, and the
// @hourly/@daily/@weekly/@monthly/@yearly descriptors. @every is parsed by
// Parse itself: robfig counts it from process start, which would make
// instances disagree.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec is a parsed schedule. Every instance that parses the same spec and
// zone computes the same instants: they are UTC at millisecond precision,
// @every is anchored to the Unix epoch, and zones come from the IANA
// database embedded in the package (TZDataVersion), never from the host.
//
// Across daylight-saving changes, for cron specs in a zone:
//   - a local time that is skipped (spring forward) runs once, at the first
//     valid instant after the gap;
//   - a local time that repeats (fall back) runs once, at its first
//     occurrence — unless the spec fires every hour (hour field "*"), in
//     which case it runs in both repeated hours.
type Spec struct {
	raw      string
	zone     *time.Location
	cron     *cron.SpecSchedule // nil for @every
	every    time.Duration
	allHours bool
	canon    string // what the version hashes, apart from the zone
	version  string
	legacy   string // the version releases before the canonical hash gave this spec ("" with a revision)
}

// Parse parses spec in the time zone zone (an IANA name; "" means UTC). A
// "CRON_TZ=Zone " or "TZ=Zone " prefix in spec sets the zone too; giving a
// different zone in both is an error.
func Parse(spec, zone string) (*Spec, error) {
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, fmt.Errorf("%w: schedule is empty", ErrSpecInvalid)
	}
	if len(s) > 256 {
		return nil, fmt.Errorf("%w: schedule %.40q… is longer than 256 bytes", ErrSpecInvalid, s)
	}
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		if rest, ok := strings.CutPrefix(s, p); ok {
			name, tail, _ := strings.Cut(rest, " ")
			if zone != "" && zone != name {
				return nil, fmt.Errorf("%w: schedule %q names zone %q but the job's zone is %q", ErrSpecInvalid, spec, name, zone)
			}
			zone, s = name, strings.TrimSpace(tail)
		}
	}
	if strings.HasPrefix(s, "CRON_TZ=") || strings.HasPrefix(s, "TZ=") {
		return nil, fmt.Errorf("%w: schedule %q names a zone twice", ErrSpecInvalid, spec)
	}
	loc := time.UTC
	if zone != "" {
		l, err := loadZone(zone)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSpecInvalid, err)
		}
		loc = l
	}
	// The hash of releases before the canonical one: the spec's text and
	// zone. An instance of such a release, restarted during a rolling
	// upgrade, records it; it names this same schedule (see Legacy).
	legacy := sha256.Sum256([]byte(s + "\x00" + loc.String()))
	s = strings.Join(strings.Fields(s), " ")
	out := &Spec{raw: s, zone: loc, legacy: hex.EncodeToString(legacy[:8])}
	if rest, ok := strings.CutPrefix(s, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		switch {
		case err != nil:
			return nil, fmt.Errorf("%w: schedule %q: %v", ErrSpecInvalid, spec, err)
		case d < MinEvery:
			return nil, fmt.Errorf("%w: schedule %q: interval %v is shorter than %v", ErrSpecInvalid, spec, d, MinEvery)
		case d%time.Millisecond != 0:
			return nil, fmt.Errorf("%w: schedule %q: interval %v is not a whole number of milliseconds", ErrSpecInvalid, spec, d)
		case d > 366*24*time.Hour:
			return nil, fmt.Errorf("%w: schedule %q: interval %v is longer than a year", ErrSpecInvalid, spec, d)
		}
		out.every = d
		out.canon = fmt.Sprintf("every %d", d.Milliseconds())
	} else {
		sched, err := parser.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("%w: schedule %q: %v", ErrSpecInvalid, spec, err)
		}
		cs, ok := sched.(*cron.SpecSchedule)
		if !ok {
			return nil, fmt.Errorf("%w: schedule %q is not a cron spec", ErrSpecInvalid, spec)
		}
		c := *cs
		c.Location = time.UTC // we iterate civil (wall-clock) times; see Next
		out.cron = &c
		out.allHours = c.Hour&(1<<24-1) == 1<<24-1
		// The parsed fields, not the text: "30 2 * * *", "0 30 2 * * *",
		// extra spaces, names (MON) and descriptors (@daily = "0 0 * * *")
		// are one schedule. The fields keep robfig's "*" bit, which changes
		// how day of month and day of week combine.
		out.canon = fmt.Sprintf("cron %x %x %x %x %x %x", c.Second, c.Minute, c.Hour, c.Dom, c.Month, c.Dow)
		if c.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
			return nil, fmt.Errorf("%w: schedule %q never fires", ErrSpecInvalid, spec)
		}
	}
	zoneName := loc.String()
	if out.cron == nil { // @every counts from the epoch: the zone changes no instant
		zoneName = "UTC"
	}
	out.version = specVersion(out.canon, zoneName, TZDataVersion)
	return out, nil
}

// specVersion hashes a canonical schedule, its zone and, for a zone other
// than UTC, the tzdata release whose rules map its civil times to instants:
// instances built with different rules compute different instants, so they
// must not share a version.
func specVersion(canon, zone, tzdata string) string {
	in := "v2\x00" + canon + "\x00" + zone
	if zone != "UTC" {
		in += "\x00tzdata " + tzdata
	}
	sum := sha256.Sum256([]byte(in))
	return hex.EncodeToString(sum[:8])
}

// String returns the spec as parsed (without a zone prefix, runs of white
// space collapsed to one space).
func (s *Spec) String() string { return s.raw }

// Zone returns the spec's time zone.
func (s *Spec) Zone() *time.Location { return s.zone }

// Version is a short hash of the schedule, its zone and (for a zone other
// than UTC) TZDataVersion, stored with every claim so that instances
// running different versions of a job can tell. Equivalent specs hash
// alike: it hashes the parsed fields, so "30 2 * * *", "0 30 2 * * *",
// "30  2 * * *" and "@daily" / "0 0 * * *" share a version, as do
// "@every 60s" and "@every 1m"; an @every spec ignores its zone.
func (s *Spec) Version() string { return s.version }

// WithRevision returns s with revision n hashed into its version (n = 0:
// s itself). See Job.Revision.
func (s *Spec) WithRevision(n int) *Spec {
	if n == 0 {
		return s
	}
	c := *s
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00revision %d", s.version, n)))
	c.version, c.legacy = hex.EncodeToString(sum[:8]), ""
	return &c
}

// Legacy is the version that releases before the canonical hash recorded
// for this very spec text and zone ("" for a spec with a revision, which
// those releases did not have). A version history that holds it holds this
// schedule: it is taken as s's own version, so that an old instance
// restarted during a rolling upgrade neither switches the job nor gets the
// new version refused as superseded.
func (s *Spec) Legacy() string { return s.legacy }

// same reports whether version names s's schedule.
func (s *Spec) same(version string) bool {
	return version == s.version || (s.legacy != "" && version == s.legacy)
}

// maxShift bounds how far a zone's offset changes at one transition (the
// largest DST shift in use is 2 h); civil times further apart than this keep
// their order as instants.
const maxShift = 3 * time.Hour

// Next returns the first occurrence strictly after after, in UTC at
// millisecond precision, or the zero time if there is none within five years.
func (s *Spec) Next(after time.Time) time.Time {
	after = after.UTC()
	if s.cron == nil {
		ms := s.every.Milliseconds()
		k := after.UnixMilli()/ms + 1
		return time.UnixMilli(k * ms).UTC()
	}
	// Fast path: no zone transition within maxShift of the answer, so civil
	// time maps to instants by one fixed offset.
	local := after.In(s.zone)
	start, end := local.ZoneBounds()
	_, off := local.Zone()
	if c := s.cron.Next(civil(after, s.zone)); !c.IsZero() {
		inst := c.Add(-time.Duration(off) * time.Second)
		if (start.IsZero() || !start.After(after.Add(-maxShift))) && (end.IsZero() || inst.Add(maxShift).Before(end)) {
			return inst
		}
	}
	return s.nextBySegments(after)
}

// maxSegments bounds how many spans of one UTC offset nextBySegments
// looks through (two transitions a year for five years is ten).
const maxSegments = 64

// nextBySegments is Next near a zone transition: it looks through the
// spans of instants during which the zone keeps one UTC offset, from
// after's on. In each, civil times map to instants by that offset, so one
// cron.Next call finds the span's first match; a gap at the span's end
// (spring forward) runs at the transition if a civil time it skips
// matches; a span that begins with an overlap (fall back) skips the
// repeated civil times, which the span before ran, unless the spec fires
// every hour. Its cost is a few cron.Next calls whatever the spec, where
// walking civil times one match at a time (nextByWalk, the reference the
// tests compare it with) took tens of milliseconds for a per-second spec.
func (s *Spec) nextBySegments(after time.Time) time.Time {
	at, lower := after, after // a span is at's; candidates are strictly after lower
	for range maxSegments {
		local := at.In(s.zone)
		_, off := local.Zone()
		offset := time.Duration(off) * time.Second
		segStart, segEnd := local.ZoneBounds()
		// In UTC: cron.Next reads its argument's wall clock in UTC.
		segStart, segEnd = segStart.UTC(), segEnd.UTC()
		from := lower.Add(offset) // civil time of lower (as UTC)
		if !segStart.IsZero() && !s.allHours {
			_, prev := segStart.Add(-time.Nanosecond).In(s.zone).Zone()
			if p := time.Duration(prev) * time.Second; p > offset {
				// Fall back at segStart: civil times before segStart+prev
				// repeat ones the previous span ran.
				if rep := segStart.Add(p - time.Nanosecond); rep.After(from) {
					from = rep
				}
			}
		}
		c := s.cron.Next(from)
		if c.IsZero() {
			return time.Time{}
		}
		if inst := c.Add(-offset); segEnd.IsZero() || inst.Before(segEnd) {
			return inst
		}
		_, nextOff := segEnd.In(s.zone).Zone()
		if n := time.Duration(nextOff) * time.Second; n > offset {
			// Spring forward at segEnd: civil times in [segEnd+offset,
			// segEnd+n) are skipped; any that matches runs at segEnd.
			if c := s.cron.Next(segEnd.Add(offset - time.Nanosecond)); !c.IsZero() && c.Before(segEnd.Add(n)) {
				return segEnd
			}
		}
		// The next span: candidates from segEnd on.
		at, lower = segEnd, segEnd.Add(-time.Nanosecond)
	}
	return s.nextByWalk(after)
}

// nextByWalk is Next near a transition by walking civil times one match at
// a time: the reference nextBySegments is tested against.
func (s *Spec) nextByWalk(after time.Time) time.Time {
	// Walk civil times (the zone's wall clock, represented in UTC) from a
	// little before after's civil time, map each to its instants by the DST
	// rules, and keep the earliest instant after after. Once civil times
	// are more than maxShift past the best found, nothing later can beat it.
	c := civil(after, s.zone).Add(-maxShift).Truncate(time.Second)
	var best time.Time
	for i := 0; i < 1_000_000; i++ {
		c = s.cron.Next(c.Add(-time.Second)) // first match ≥ c
		if c.IsZero() {
			return best
		}
		if !best.IsZero() && c.After(civil(best, s.zone).Add(maxShift)) {
			return best
		}
		for _, inst := range s.instants(c) {
			if inst.After(after) && (best.IsZero() || inst.Before(best)) {
				best = inst
			}
		}
		c = c.Add(time.Second)
	}
	return best
}

// civil returns t's wall-clock time in loc as a UTC time.
func civil(t time.Time, loc *time.Location) time.Time {
	y, mo, d := t.In(loc).Date()
	h, mi, sec := t.In(loc).Clock()
	return time.Date(y, mo, d, h, mi, sec, t.Nanosecond(), time.UTC)
}

// instants maps a civil time to the instants it denotes in the spec's zone:
// one normally; in a gap, the instant the gap ends; in an overlap, the first
// occurrence, or both if the spec fires every hour.
func (s *Spec) instants(c time.Time) []time.Time {
	var found []time.Time
	for _, probe := range []time.Duration{-14 * time.Hour, 0, 14 * time.Hour} {
		_, off := c.Add(probe).In(s.zone).Zone()
		inst := c.Add(-time.Duration(off) * time.Second)
		if _, o := inst.In(s.zone).Zone(); o == off && civil(inst, s.zone).Equal(c) {
			dup := false
			for _, f := range found {
				dup = dup || f.Equal(inst)
			}
			if !dup {
				found = append(found, inst)
			}
		}
	}
	switch {
	case len(found) == 0: // a gap: run at its end
		_, off := c.Add(14 * time.Hour).In(s.zone).Zone() // the offset after the gap
		_, end := c.Add(-time.Duration(off) * time.Second).In(s.zone).ZoneBounds()
		if end.IsZero() {
			return nil
		}
		return []time.Time{end.UTC()}
	case len(found) > 1 && !s.allHours: // an overlap: the first occurrence only
		if found[1].Before(found[0]) {
			found[0] = found[1]
		}
		return found[:1]
	}
	return found
}
