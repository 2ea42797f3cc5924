package admin

import "github.com/leasehold/leasehold"

// The API's JSON documents. Tokens marshal as decimal strings.

// Instance is one daemon of the namespace.
type Instance struct {
	Instance string `json:"instance"`
	Self     bool   `json:"self"`
	// Alive: the instance holds its instance lease now (by the backend's
	// clock). An instance seen alive by this server within the last hour
	// that no longer holds it is listed with Alive false.
	Alive            bool            `json:"alive"`
	Token            leasehold.Token `json:"token,omitempty"`
	LeaseRemainingMS int64           `json:"lease_remaining_ms,omitempty"`
	// LeaseExpiresAt is when the instance lease ends unless renewed: the
	// instance renews it every third of its TTL while it is alive.
	LeaseExpiresAt string `json:"lease_expires_at,omitempty"`
	LastSeen       string `json:"last_seen"` // by this server
}

// Leader is the holder of one election role of the namespace.
type Leader struct {
	Role             string          `json:"role"`
	Instance         string          `json:"instance"`
	Self             bool            `json:"self"`
	Token            leasehold.Token `json:"token"`
	LeaseRemainingMS int64           `json:"lease_remaining_ms"`
	// Since: for this instance's own term, when it was elected (this host's
	// clock); for another instance's, when this server first saw the term
	// (its token), which may be later than the election.
	Since string `json:"since"`
	// SinceObserved is true when Since is an observation, not the election.
	SinceObserved bool `json:"since_observed"`
}

// Lock is one held lease of the namespace.
type Lock struct {
	Key string `json:"key"`
	// Kind is LockKindInstance for a daemon's own instance lease
	// ("instances/<id>"), which keeps a second daemon with the same id from
	// running beside it, and LockKindUser for every other lock.
	Kind     string `json:"kind"`
	Instance string `json:"instance"`
	// Process is, for a daemon's instance lock ("instances/<id>"), the
	// holding process as "host:pid:start ticks:boot id".
	Process     string          `json:"process,omitempty"`
	Token       leasehold.Token `json:"token"`
	RemainingMS int64           `json:"remaining_ms"`
	ExpiresAt   string          `json:"expires_at"`
}

// Job is one job of this daemon.
type Job struct {
	Name     string   `json:"name"`
	Schedule string   `json:"schedule"`
	Zone     string   `json:"zone"`
	Mode     string   `json:"mode"`
	Paused   bool     `json:"paused"`
	Next     []string `json:"next"`
	// LastClaimed is the latest instant claimed for the job anywhere (its
	// high-water mark), "" if never.
	LastClaimed string `json:"last_claimed,omitempty"`
	// Version is the job's schedule version on this daemon. VersionRefused:
	// it was superseded by CurrentVersion, so this daemon refused to record
	// it again and claims nothing for the job (it runs an old config).
	Version        string `json:"version,omitempty"`
	CurrentVersion string `json:"current_version,omitempty"`
	VersionRefused bool   `json:"version_refused,omitempty"`
	// State is what this daemon does for the job (JobActive, JobPaused,
	// JobPending, JobSuperseded, JobRefused) and StateNote, unless
	// active or paused, why and what to do.
	State     string `json:"state"`
	StateNote string `json:"state_note,omitempty"`
	// Cluster is the job's state across the namespace, the same on every
	// daemon: read from the ledger, not from this daemon's config.
	Cluster *JobCluster `json:"cluster"`
}

// JobCluster is a job's state across the namespace.
type JobCluster struct {
	// Version is the schedule version that applies now (whichever daemon
	// recorded it), Since the instant from which it applies, Schedule its
	// spec as recorded; all "" before any version was recorded.
	Version  string `json:"version"`
	Since    string `json:"since"`
	Schedule string `json:"schedule"`
	// NextVersion is a version recorded to apply from NextFrom, ahead.
	NextVersion string `json:"next_version,omitempty"`
	NextFrom    string `json:"next_from,omitempty"`
	// Running is false when the job runs nowhere: it is paused, or no
	// instance claimed an occurrence under Version since it applies (every
	// daemon runs another version, or refused its own). Note says why.
	Running bool   `json:"running"`
	Note    string `json:"note,omitempty"`
	// RefusedOn lists the daemons that refuse their own schedule version
	// of the job (a replaced spec still deployed there: they claim
	// nothing), as each states it while it refuses (schedule.ReadAllRefusals).
	RefusedOn []JobRefusal `json:"refused_on,omitempty"`
}

// JobRefusal is one daemon's refusal of its schedule version of a job.
type JobRefusal struct {
	Instance string `json:"instance"`
	Version  string `json:"version"`
	// Schedule is the refused version's spec, "" once its record was
	// pruned.
	Schedule string `json:"schedule"`
}

// Run is one occurrence in the run ledger.
type Run struct {
	Job         string          `json:"job"`
	ScheduledAt string          `json:"scheduled_at"`
	State       string          `json:"state"`
	Expired     bool            `json:"expired,omitempty"` // running, but its runner's lease expired
	Instance    string          `json:"instance"`
	Token       leasehold.Token `json:"token"`
	Attempt     int             `json:"attempt"`
	ClaimedAt   string          `json:"claimed_at,omitempty"`
	FinishedAt  string          `json:"finished_at,omitempty"`
	DurationMS  int64           `json:"duration_ms"`
	Result      string          `json:"result,omitempty"`
	Error       string          `json:"error,omitempty"`
	// Trigger is the idempotency key of a triggered run ("run now"); empty
	// for a scheduled run.
	Trigger string `json:"trigger,omitempty"`
	// OutputTruncated: Result or Error is a preview (in a list); the
	// run's detail request (GET /api/v1/runs/{job}/{scheduled_at})
	// returns them whole.
	OutputTruncated bool `json:"output_truncated,omitempty"`
}

// RunPage is a page of history.
type RunPage struct {
	Runs []Run `json:"runs"`
	// NextCursor, when not empty, fetches the next (older) page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Status is everything the dashboard and `leasehold status` show.
type Status struct {
	Namespace string     `json:"namespace"`
	Instance  string     `json:"instance"` // the daemon serving this API
	Now       string     `json:"now"`
	Instances []Instance `json:"instances"`
	Leaders   []Leader   `json:"leaders"`
	Locks     []Lock     `json:"locks"`
	Jobs      []Job      `json:"jobs"`
	Runs      []Run      `json:"runs"`
}

// Lock kinds.
const (
	LockKindUser     = "lock"
	LockKindInstance = "instance"
)
