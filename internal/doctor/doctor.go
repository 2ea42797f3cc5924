// Package doctor says what a backend guarantees, and why, for people:
// "leasehold doctor" prints its Report, and the daemon logs its Warnings at
// start (the same function, so the two never disagree).
//
// Each capability of backend.Capabilities is shown with a reason: the
// backend's own (backend.Explainer reads the server's configuration, such as
// Redis's appendonly) where it gives one, else what the value means. The
// report also has the round trip of a Get (median of a few) and, where the
// backend can read the clock its expiry is judged by (backend.ServerClock),
// that clock's offset from this host's.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// Line is one capability: its value and why it has it.
type Line struct {
	Capability string
	Value      string
	// Warn: the value is a guarantee the backend does not give that an
	// operator should know about.
	Warn bool
	Why  string
}

// Report is what Check found.
type Report struct {
	Name  string // the backend's name
	Lines []Line
	// RTT is the median round trip of Rounds Gets.
	RTT    time.Duration
	Rounds int
	// Offset is the backend's clock minus this host's, when ClockKnown; it
	// is measured to within ±OffsetBound (half the round trip).
	ClockKnown  bool
	Offset      time.Duration
	OffsetBound time.Duration
	// ExplainErr is why the backend's own reasons could not be read (the
	// generic ones are shown instead); nil when they were, or it has none.
	ExplainErr error
}

// ErrUnreachable wraps the error of a backend that did not answer a Get.
var ErrUnreachable = errors.New("backend did not answer")

// ClockWarnAt is the clock offset past which a warning is given: the
// scheduler's default claim tolerance, past which on-time claims are
// refused as early or late by the backend's clock.
const ClockWarnAt = time.Second

// Check measures l: Rounds Gets for the round trip (an error wrapping
// ErrUnreachable if one fails), the clock offset, and the reasons for each
// capability.
func Check(ctx context.Context, l backend.Leases, rounds int) (Report, error) {
	r := Report{Name: l.Capabilities().Name, Rounds: max(rounds, 1)}
	key := "leasehold-doctor/" + backend.NewNonce().String()
	var rtts []time.Duration
	for range r.Rounds {
		t0 := time.Now()
		_, err := l.Get(ctx, key)
		if err != nil && !errors.Is(err, backend.ErrNotFound) {
			return r, fmt.Errorf("%w: Get: %w", ErrUnreachable, err)
		}
		rtts = append(rtts, time.Since(t0))
	}
	slices.Sort(rtts)
	r.RTT = rtts[len(rtts)/2]
	if sc, ok := l.(backend.ServerClock); ok {
		t0 := time.Now()
		st, err := sc.ServerTime(ctx)
		t1 := time.Now()
		if err == nil {
			half := t1.Sub(t0) / 2
			r.ClockKnown, r.Offset, r.OffsetBound = true, st.Sub(t0.Add(half)), half
		}
	}
	r.Lines, r.ExplainErr = lines(ctx, l)
	return r, nil
}

// Warnings returns one sentence per guarantee l does not give, with its
// reason, for a log at start. It reads the server's configuration (bounded
// by ctx) but measures nothing.
func Warnings(ctx context.Context, l backend.Leases) []string {
	ls, _ := lines(ctx, l)
	return warnings(ls)
}

// Warnings returns the report's warnings, as the package's Warnings does,
// plus one for a clock offset past ClockWarnAt.
func (r Report) Warnings() []string {
	ws := warnings(r.Lines)
	if r.ClockKnown && (r.Offset > ClockWarnAt || r.Offset < -ClockWarnAt) {
		ws = append(ws, fmt.Sprintf("clock: the backend's clock is %v off this host's (past %v): the scheduler's claims, judged by the backend's clock, are refused as early or late", r.Offset.Round(time.Millisecond), ClockWarnAt))
	}
	return ws
}

func warnings(ls []Line) []string {
	var ws []string
	for _, l := range ls {
		if l.Warn {
			ws = append(ws, l.Capability+" "+l.Value+": "+l.Why)
		}
	}
	return ws
}

// lines builds a Line per capability, with the backend's own reasons where
// it explains itself.
func lines(ctx context.Context, l backend.Leases) ([]Line, error) {
	c := l.Capabilities()
	own := map[string]string{}
	var explainErr error
	if e, ok := l.(backend.Explainer); ok {
		rs, err := e.Explain(ctx)
		explainErr = err
		for _, r := range rs {
			own[r.Capability] = r.Why
		}
	}
	pick := func(name, generic string) string {
		if w, ok := own[name]; ok {
			return w
		}
		return generic
	}
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	_, ledger := l.(backend.Ledger)
	ls := []Line{
		{"ServerClock", yes(c.ServerClock), !c.ServerClock, pick("ServerClock", choose(c.ServerClock,
			"expiry is judged by one clock the backend owns, not by each client's",
			"expiry is judged by each client's clock: clock skew between hosts shortens or lengthens leases"))},
		{"SafeFencing", yes(c.SafeFencing), !c.SafeFencing, pick("SafeFencing", choose(c.SafeFencing,
			"tokens strictly increase per key for as long as the backend's data lives",
			"tokens can repeat or go backwards (see the backend's package doc): a resource cannot reject a stale holder by token"))},
		{"DurableFencing", yes(c.DurableFencing), !c.DurableFencing, pick("DurableFencing", choose(c.DurableFencing,
			"a committed grant is on stable storage: tokens keep increasing across a crash or restart of the backend",
			"a crash or restart of the backend can lose grants: tokens can go backwards after one"))},
		{"PushEvents", yes(c.PushEvents), false, pick("PushEvents", choose(c.PushEvents,
			"a release reaches waiters in other processes at once",
			"waiters in other processes poll for a release"))},
		{"MultiProcess", yes(c.MultiProcess), !c.MultiProcess, pick("MultiProcess", choose(c.MultiProcess,
			"several processes can share the backend",
			"only this process sees its leases: it locks nothing for anyone else"))},
		{"MinTTL", c.MinTTL.String(), false, pick("MinTTL", "shorter leases are refused")},
		{"TTLGranularity", granularity(c.TTLGranularity), false, pick("TTLGranularity", choose(c.TTLGranularity == 0,
			"a granted TTL is the TTL asked for", "granted TTLs are rounded up to a multiple of this"))},
		{"Ledger", yes(ledger), !ledger, choose(ledger,
			"it implements backend.Ledger: jobs, runs and the daemon can use it",
			"it implements backend.Leases only: jobs, runs and the daemon refuse it (locks and elections work)")},
	}
	return ls, explainErr
}

func choose(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}

func granularity(d time.Duration) string {
	if d == 0 {
		return "exact"
	}
	return d.String()
}

// WriteText prints the report for people; shown is the backend's URL,
// redacted.
func (r Report) WriteText(w io.Writer, shown string) error {
	fmt.Fprintf(w, "backend:    %s (%s)\n", shown, r.Name)
	fmt.Fprintf(w, "round trip: %v (median of %d Gets)\n", r.RTT.Round(time.Microsecond), r.Rounds)
	if r.ClockKnown {
		fmt.Fprintf(w, "clock:      the backend's clock is %+v from this host's (±%v)\n", r.Offset.Round(time.Microsecond), r.OffsetBound.Round(time.Microsecond))
	} else {
		fmt.Fprintf(w, "clock:      the backend cannot report the clock its expiry is judged by\n")
	}
	if r.ExplainErr != nil {
		fmt.Fprintf(w, "note:       the server's configuration could not be read (%v): the reasons below are the general ones\n", r.ExplainErr)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CAPABILITY\tVALUE\tWHY")
	for _, l := range r.Lines {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", l.Capability, l.Value, l.Why)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	ws := r.Warnings()
	if len(ws) == 0 {
		_, err := fmt.Fprintln(w, "\nno warnings")
		return err
	}
	fmt.Fprintln(w, "\nwarnings:")
	for _, s := range ws {
		fmt.Fprintf(w, "  - %s\n", strings.TrimSpace(s))
	}
	return nil
}
