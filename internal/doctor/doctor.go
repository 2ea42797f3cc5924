// Package doctor says what a backend guarantees, and why, for people:
// "leasehold doctor" prints its Report, and the daemon logs its Warnings at
// start (the same function, so the two never disagree).
//
// The capabilities are read again first where they rest on the server's
// live configuration (backend.CapabilityRefresher), so that neither states
// a guarantee from a stale reading; the daemon also re-reads them every
// minute and logs what changed (Changes).
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
	"github.com/leasehold/leasehold/internal/supervisor"
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
	// KillMode is how this host's command supervisors hold a command's
	// process tree (internal/supervisor: cgroup, process-group or process),
	// and KillModeWhy why.
	KillMode, KillModeWhy string
	// ExplainErr is why the backend's own reasons could not be read (the
	// generic ones are shown instead); nil when they were, or it has none.
	ExplainErr error
	// ReadAt is when the server's configuration the capabilities rest on
	// was read (just before the report, for a backend.CapabilityRefresher);
	// zero when they rest on none.
	ReadAt time.Time
	// RefreshErr is why that configuration could not be read again: the
	// capabilities resting on it are declared false.
	RefreshErr error
}

// Declaration is what a backend declares now: its capabilities, read
// again first where they rest on the server's configuration (a stale
// reading is no declaration), and a Line for each.
type Declaration struct {
	Capabilities backend.Capabilities
	Lines        []Line
	// RefreshErr and ExplainErr are as in Report.
	RefreshErr, ExplainErr error
}

// Declare reads l's declaration: backend.CapabilityRefresher's
// RefreshCapabilities where l implements it, else Capabilities, with the
// backend's own reasons (backend.Explainer) where it gives them.
func Declare(ctx context.Context, l backend.Leases) Declaration {
	var d Declaration
	if r, ok := l.(backend.CapabilityRefresher); ok {
		d.Capabilities, d.RefreshErr = r.RefreshCapabilities(ctx)
	} else {
		d.Capabilities = l.Capabilities()
	}
	d.Lines, d.ExplainErr = lines(ctx, l, d.Capabilities)
	return d
}

// Warnings returns one sentence per guarantee the declaration does not
// give, with its reason, and one for a configuration that could not be
// read.
func (d Declaration) Warnings() []string {
	ws := warnings(d.Lines)
	if d.RefreshErr != nil {
		ws = append(ws, refreshWarning(d.RefreshErr))
	}
	return ws
}

func refreshWarning(err error) string {
	return fmt.Sprintf("configuration: could not be read again (%v): the guarantees resting on it are not claimed", err)
}

// Change is a capability whose value differs between two declarations:
// the new Line (Warn: the new value is a guarantee not given) and the old
// value.
type Change struct {
	Line
	Was string
}

// String says the change for people: "DurableFencing no, was yes: why".
func (c Change) String() string {
	return fmt.Sprintf("%s %s, was %s: %s", c.Capability, c.Value, c.Was, c.Why)
}

// Changes returns the capabilities whose values differ between two
// declarations (was, then now), with now's reasons.
func Changes(was, now Declaration) []Change {
	old := map[string]string{}
	for _, l := range was.Lines {
		old[l.Capability] = l.Value
	}
	var cs []Change
	for _, l := range now.Lines {
		if v, ok := old[l.Capability]; ok && v != l.Value {
			cs = append(cs, Change{Line: l, Was: v})
		}
	}
	return cs
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
	r.KillMode, r.KillModeWhy = supervisor.KillModeFor()
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
	d := Declare(ctx, l)
	r.Lines, r.ExplainErr, r.ReadAt, r.RefreshErr = d.Lines, d.ExplainErr, d.Capabilities.ReadAt, d.RefreshErr
	return r, nil
}

// Warnings returns one sentence per guarantee l does not give, with its
// reason, for a log at start: Declare's Warnings. It reads the server's
// configuration (bounded by ctx) but measures nothing.
func Warnings(ctx context.Context, l backend.Leases) []string {
	return Declare(ctx, l).Warnings()
}

// Warnings returns the report's warnings, as the package's Warnings does,
// plus one for a clock offset past ClockWarnAt.
func (r Report) Warnings() []string {
	ws := Declaration{Lines: r.Lines, RefreshErr: r.RefreshErr}.Warnings()
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

// lines builds a Line per capability of c, with the backend's own reasons
// where it explains itself.
func lines(ctx context.Context, l backend.Leases, c backend.Capabilities) ([]Line, error) {
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
			choose(HostLocal(c), "several processes on this host can share the backend (see HostsShared)", "several processes can share the backend"),
			"only this process sees its leases: it locks nothing for anyone else"))},
		{"HostsShared", yes(!HostLocal(c)), false, choose(HostLocal(c), LocalNote, "processes on every host that reaches the server share its leases and ledger")},
		{"MinTTL", c.MinTTL.String(), false, pick("MinTTL", "shorter leases are refused")},
		{"TTLGranularity", granularity(c.TTLGranularity), false, pick("TTLGranularity", choose(c.TTLGranularity == 0,
			"a granted TTL is the TTL asked for", "granted TTLs are rounded up to a multiple of this"))},
		{"Ledger", yes(ledger), !ledger, choose(ledger,
			"it implements backend.Ledger: jobs, runs and the daemon can use it",
			"it implements backend.Leases only: jobs, runs and the daemon refuse it (locks and elections work)")},
	}
	if c.Name == "etcd" {
		ls = append(ls, Line{"TenantIsolation", "no", false, etcdTenants})
	}
	return ls, explainErr
}

// etcdTenants is why tenants sharing one etcd are not isolated, whatever
// RBAC confines them to (docs/namespaces.md, etcd).
const etcdTenants = "etcd's RBAC covers keys, not leases: any authenticated user can list every lease (LeaseLeases) and keep any alive (LeaseKeepAlive), " +
	"so a tenant confined to its prefix can keep another tenant's crashed holder's lock held for as long as it likes " +
	"(and, before etcd 3.4.26/3.5.9, read that tenant's key names with LeaseTimeToLive keys=true, CVE-2023-32082): " +
	"prefixes on one etcd are no isolation against a hostile tenant; give such tenants their own etcd (docs/namespaces.md)"

// LocalNote is why a host-local backend (HostLocal) is no shared ledger:
// the daemon logs it at start and "leasehold doctor" prints it.
const LocalNote = "the ledger is local to this host (a file or this process): daemons on other hosts do not share it, " +
	"so each host with its own copy runs every job; for several hosts use a shared server (redis://, postgres://, mysql://, etcd://, zk://)"

// HostLocal reports whether a backend that declares c keeps its leases
// and ledger on this host only (SQLite's file, memory).
func HostLocal(c backend.Capabilities) bool { return c.Name == "sqlite" || c.Name == "memory" }

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
	if !r.ReadAt.IsZero() {
		fmt.Fprintf(w, "read at:    %s (the server's configuration the capabilities rest on)\n", r.ReadAt.UTC().Format(time.RFC3339))
	}
	if r.KillMode != "" {
		fmt.Fprintf(w, "kill mode:  %s: %s\n", r.KillMode, r.KillModeWhy)
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
