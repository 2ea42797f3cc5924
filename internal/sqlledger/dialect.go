// Package sqlledger is the run ledger, the lease layer and the record
// store of the SQL backends (backend/mysql, backend/postgres,
// backend/sqlite) written once: the rules a claim, a reclaim and an
// abandon are judged by, the guarded updates of a run or a lease, the
// reads (GetRun, ListRuns, Get, List) and Prune that are the same
// statement in every SQL database but for its dialect, and the record
// store's steps (Records). A backend keeps its Dialect and what truly differs between the
// databases (how a claim or an acquire takes its token atomically, which
// clock judges expiry), each saying why it differs.
package sqlledger

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// Dialect is what one SQL database says differently.
type Dialect struct {
	// Numbered: placeholders are $1, $2, … (PostgreSQL) instead of ?.
	// Statements here are written with ?; Bind numbers them.
	Numbered bool
	// Now is the server's clock, the one expiry is judged by in SQL:
	// NOW(6), clock_timestamp(). Empty where expiry is judged in Go
	// (SQLite: one host, a boot-scoped monotonic clock).
	Now string
	// Later returns the SQL of Now plus arg microseconds (arg is a
	// placeholder or an expression).
	Later func(arg string) string
	// AtColumn is the column of an occurrence's instant: scheduled_at
	// (a timestamp) or scheduled_ms (SQLite: milliseconds).
	AtColumn string
	// HighColumn is the jobs table's column of the high-water mark:
	// high_at, or high_ms (SQLite).
	HighColumn string
	// KeyColumn is the leases table's key column: key, or k (MySQL, where
	// KEY is a reserved word).
	KeyColumn string
	// Remaining is the SQL of a lease's remaining time by Now, in whole
	// microseconds (expires_at minus Now). Empty where expiry is judged
	// in Go.
	Remaining string
	// ScanInstant returns a scan destination for a nullable instant
	// column, and how to read it after the scan (false: NULL). Nil: a
	// timestamp column (TimeInstant).
	ScanInstant func() (dest any, get func() (time.Time, bool))
	// Instant converts an instant (already backend.Instant or
	// backend.CeilInstant) to what AtColumn is compared with.
	Instant func(time.Time) any
	// NotInJob is the condition that the placeholder's text does not
	// occur in the column job, with %s for the placeholder: LOCATE(%s,
	// job) = 0, strpos(job, %s) = 0, instr(job, %s) = 0.
	NotInJob string
	// UnsignedToken: the token columns are BIGINT UNSIGNED (MySQL) and
	// are scanned as uint64; else as BIGINT (int64).
	UnsignedToken bool
	// NoRows is the driver's "no rows" error (sql.ErrNoRows,
	// pgx.ErrNoRows).
	NoRows error
	// Err classifies a database error (refusals) and adds the context's
	// end; the backend's guard.Guard names the call it failed.
	Err func(ctx context.Context, err error) error
}

// Bind returns q with its ? placeholders numbered when the dialect
// numbers them. The statements of this package carry no ? in literals.
func (d *Dialect) Bind(q string) string {
	if !d.Numbered {
		return q
	}
	var sb strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			fmt.Fprintf(&sb, "$%d", n)
			continue
		}
		sb.WriteRune(c)
	}
	return sb.String()
}

// TimeInstant is ScanInstant for a nullable timestamp column.
func TimeInstant() (any, func() (time.Time, bool)) {
	var t *time.Time
	return &t, func() (time.Time, bool) {
		if t == nil {
			return time.Time{}, false
		}
		return t.UTC(), true
	}
}

// RunCols are the columns ScanRun reads, for a dialect that judges expiry
// by the server's clock: the last is Expired.
func (d *Dialect) RunCols() string {
	return `job, scheduled_at, spec_version, instance, nonce, token, attempt, state,
	claimed_at, finished_at, duration_ns, result, error,
	(state = 'running' AND expires_at <= ` + d.Now + `)`
}

// RunGuard is the WHERE clause of a guarded update of a run, for a dialect
// that judges expiry by the server's clock: the occurrence is running,
// held by owner and token, and its lease is unexpired. Its placeholders
// take job, scheduled_at, instance, nonce, token (GuardArgs).
func (d *Dialect) RunGuard() string {
	return `job = ? AND scheduled_at = ? AND state = 'running' AND instance = ? AND nonce = ?
	AND token = ? AND expires_at > ` + d.Now
}

// GuardArgs are the arguments of RunGuard.
func (d *Dialect) GuardArgs(job string, at time.Time, owner backend.Owner, token uint64) []any {
	return []any{job, at, owner.Instance, owner.Nonce[:], d.token(token)}
}

// token is a token as the dialect's token columns take it.
func (d *Dialect) token(t uint64) any {
	if d.UnsignedToken {
		return t
	}
	return int64(t)
}

// tokenScan returns a scan destination for a token column (BIGINT UNSIGNED
// or BIGINT, as UnsignedToken says) and a func that stores what was
// scanned into *t: ScanLease and ScanRun read tokens alike.
func (d *Dialect) tokenScan(t *uint64) (dest any, done func()) {
	if d.UnsignedToken {
		return t, func() {}
	}
	var v int64
	return &v, func() { *t = uint64(v) }
}

// Micros is d in whole microseconds, rounded up: the resolution of
// MySQL's DATETIME(6) and PostgreSQL's timestamptz, so that a lease is
// never shorter than asked.
func Micros(d time.Duration) int64 { return int64((d + time.Microsecond - 1) / time.Microsecond) }

// MicrosTTL is d as Micros stores it.
func MicrosTTL(d time.Duration) time.Duration { return time.Duration(Micros(d)) * time.Microsecond }

// SetNonce copies a stored nonce into n, refusing one of the wrong length.
func SetNonce(n *backend.Nonce, b []byte) error {
	if len(b) != len(n) {
		return fmt.Errorf("stored nonce has %d bytes, want %d", len(b), len(n))
	}
	copy(n[:], b)
	return nil
}
