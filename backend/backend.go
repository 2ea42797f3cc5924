// Package backend defines the small contract every leasehold backend
// implements: leases with fencing tokens (Leases), an optional push of
// release events (Notifier), an optional server-side line of waiters
// (Queue) and the optional run ledger used by the scheduler (Ledger; see
// LedgerOf).
//
// The package holds interfaces and plain data only. Implementations live in
// backend/<name>; backend/conformance is the one test suite every
// implementation must pass. Users normally reach a backend through the root
// leasehold package and never call these methods themselves.
//
// Contract, in short (DESIGN.md, "Semantics that must hold"):
//
//   - While a lease on key K is unexpired by the backend's clock, no second
//     Acquire on K succeeds.
//   - Every grant on K returns a token greater than every token ever returned
//     for K. Release clears the holder but keeps the counter.
//   - Renew, Release, Heartbeat and Finish are guarded by owner nonce + token;
//     a mismatch is ErrLeaseLost.
//   - Acquire and Claim are idempotent per owner nonce: a retry of a request
//     that was applied returns the same grant (Acquire also renews it to the
//     TTL from now).
//   - Bad input is rejected with an error wrapping ErrInvalid that names the
//     field and the value, before anything is changed.
//
// # Adding a backend
//
// Four places, each checked by a test that fails when one is missing:
//
//  1. the package backend/<name>: New(client, ...Option) over a client the
//     application owns (Close leaves it open; postgres and mysql take a ctx
//     first, for the checks New runs on it) and Open(ctx, url, ...Option),
//     which makes and owns its connection, as redis, redlock, etcd,
//     postgres and mysql have. The exceptions, each explained in its
//     package: memory has no client or options (New(), Open(ctx,
//     url)); SQLite has Open only, because its correctness rests on
//     connection settings a caller's *sql.DB could not be checked for;
//     ZooKeeper's New(ctx, servers, ...Option) makes and owns the session
//     (WithConnOptions shapes it), because its locks are ephemeral nodes
//     that only closing the session ends. It implements Leases,
//     and Ledger only if it can keep a run ledger (optionally Notifier,
//     Queue, Explainer and ServerClock);
//  2. one row in backend/open's table (name, schemes, URL form, summary,
//     open): Open, "leasehold --help" and "leasehold doctor" read it;
//  3. one row in internal/chaos/harness's server table (how to start a
//     private server for it, and whether chaos runs and the bench matrix
//     can use it); backend/open's TestOpenEveryBackend fails unless the two
//     tables have the same rows, and opens every scheme against that server;
//  4. one conformance_test.go calling conformance.Run.
//
// A backend whose server is a new kind of program also needs its starter in
// internal/testserver, which the row in 3 calls.
package backend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Backends wrap them with %w; callers test with errors.Is.
var (
	// ErrHeld: the key is held by another owner (Acquire). The error is a
	// *HeldError carrying the current holder.
	ErrHeld = errors.New("leasehold/backend: held by another owner")
	// ErrLeaseLost: the caller's owner nonce and token no longer hold the
	// lease or claim (it expired, was taken over, or was released).
	ErrLeaseLost = errors.New("leasehold/backend: lease lost")
	// ErrNotFound: no lease or claim exists for the key (Get).
	ErrNotFound = errors.New("leasehold/backend: not found")
	// ErrInvalid: the request was malformed; nothing was changed.
	ErrInvalid = errors.New("leasehold/backend: invalid argument")
	// ErrClaimed: the occurrence is already claimed. The error is a
	// *ClaimedError carrying the current record.
	ErrClaimed = errors.New("leasehold/backend: occurrence already claimed")
	// ErrNotExpired: Reclaim or Abandon was asked for an occurrence whose
	// runner still holds an unexpired lease.
	ErrNotExpired = errors.New("leasehold/backend: runner's lease has not expired")
	// ErrTooEarly: a claim was made while the backend's clock says the
	// occurrence is still in the future beyond the allowed tolerance.
	ErrTooEarly = errors.New("leasehold/backend: occurrence is in the future")
	// ErrTooLate: a claim was made while the backend's clock says the
	// occurrence is older than the claim's MaxLate: it is a misfire, for the
	// job's misfire policy, not a claim by a process that woke late.
	ErrTooLate = errors.New("leasehold/backend: occurrence is too late to claim (a misfire)")
	// ErrOverlap: a claim would exceed the job's cluster-wide limit of
	// concurrently running occurrences.
	ErrOverlap = errors.New("leasehold/backend: too many running occurrences")
	// ErrClosed: the backend was closed.
	ErrClosed = errors.New("leasehold/backend: closed")
	// ErrNotApplied: nothing of the request remains: it was never sent (its
	// context ended while it waited for a connection), or what it did was
	// undone and the undoing confirmed (a queued acquire that left its
	// queue). Unlike a timeout after sending, it leaves no outcome to find
	// out.
	ErrNotApplied = errors.New("leasehold/backend: request not sent")
	// ErrRefused: the server refused the request for want of permission
	// (an ACL, a missing grant, a failed authentication). Retrying gets the
	// same answer until the server's configuration changes, so callers
	// give up at once. When the refusal came before anything of the
	// request ran, the error matches ErrNotApplied too (nothing to find
	// out); else part of it may have run (see Refused).
	ErrRefused = errors.New("leasehold/backend: refused by the server")
)

// Refused marks err, a server's refusal, as ErrRefused; notApplied says the
// server refused the request before any of it ran, and makes the result
// match ErrNotApplied too. The message is err's, unchanged; errors.As
// still finds err's own type.
func Refused(err error, notApplied bool) error {
	if err == nil {
		return nil
	}
	return &refusedError{err: err, notApplied: notApplied}
}

type refusedError struct {
	err        error
	notApplied bool
}

func (e *refusedError) Error() string { return e.err.Error() }

func (e *refusedError) Unwrap() []error {
	if e.notApplied {
		return []error{ErrRefused, ErrNotApplied, e.err}
	}
	return []error{ErrRefused, e.err}
}

// Nonce is a 128-bit random value that identifies one grant (and one
// request: retries of the same Acquire or Claim reuse it).
type Nonce [16]byte

// NewNonce returns a fresh random nonce.
func NewNonce() Nonce {
	var n Nonce
	if _, err := rand.Read(n[:]); err != nil {
		// crypto/rand.Read never fails on supported platforms (Go ≥ 1.24
		// crashes the program instead); keep the check for clarity.
		panic(fmt.Sprintf("leasehold: crypto/rand: %v", err))
	}
	return n
}

// String returns the nonce as 32 lowercase hex digits.
func (n Nonce) String() string { return hex.EncodeToString(n[:]) }

// IsZero reports whether n is the zero nonce (never a valid owner nonce).
func (n Nonce) IsZero() bool { return n == Nonce{} }

// ParseNonce parses the form produced by Nonce.String.
func ParseNonce(s string) (Nonce, error) {
	var n Nonce
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(n) {
		return n, fmt.Errorf("%w: nonce %q is not 32 hex digits", ErrInvalid, s)
	}
	copy(n[:], b)
	return n, nil
}

// Owner identifies the holder of a lease or claim: the instance name, which
// people read, plus a nonce per grant, which makes two instances configured
// with the same name distinct.
type Owner struct {
	Instance string
	Nonce    Nonce
}

// String returns "instance/nonce".
func (o Owner) String() string { return o.Instance + "/" + o.Nonce.String() }

// Limits shared by every backend; a backend may be stricter (MinTTL).
const (
	MaxKeyLen      = 512            // bytes, namespace included
	MaxInstanceLen = 128            // bytes
	MaxTTL         = 24 * time.Hour // a longer lease is a configuration mistake
	MaxErrorLen    = 4096           // Finish error text is cut to this (CleanText)
	MaxResultLen   = 16384          // Finish result text is cut to this (CleanText)
)

// Grant is what Acquire, Renew and Claim return to the owner.
type Grant struct {
	Token uint64        // fencing token; strictly increasing per key
	TTL   time.Duration // the TTL the backend actually granted (may be rounded up)
}

// Lease is the current state of a held key, as Get and List report it.
type Lease struct {
	Key   string
	Owner Owner
	Token uint64
	// Remaining is how long the lease has left by the backend's clock when
	// it was read. It is information for people and polling intervals, never
	// a basis for safety decisions.
	Remaining time.Duration
}

// HeldError is returned by Acquire when the key is held by someone else.
type HeldError struct{ Holder Lease }

// Error names the key and its holder.
func (e *HeldError) Error() string {
	return fmt.Sprintf("key %q is held by %s (token %d)", e.Holder.Key, e.Holder.Owner.Instance, e.Holder.Token)
}

// Unwrap makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Unwrap() error { return ErrHeld }

// Capabilities describes what a backend guarantees. Backends compute it from
// their live configuration where they can read it.
type Capabilities struct {
	// Name of the backend ("memory", "sqlite", ...).
	Name string
	// ServerClock: expiry is judged by one clock owned by the backend, not by
	// each client's clock. Memory and SQLite use the host's monotonic clock,
	// which every process on the host shares, and report true.
	ServerClock bool
	// SafeFencing: tokens strictly increase per key for as long as the
	// backend's data lives, so a resource can reject a stale holder by token.
	SafeFencing bool
	// DurableFencing: SafeFencing also holds across a crash or restart of the
	// backend server (a committed grant is on stable storage).
	DurableFencing bool
	// PushEvents: the backend implements Notifier and delivers release events
	// to waiters in other processes without polling.
	PushEvents bool
	// MultiProcess: several processes can share the backend.
	MultiProcess bool
	// MinTTL is the shortest TTL the backend grants; shorter requests are
	// rejected with ErrInvalid.
	MinTTL time.Duration
	// TTLGranularity: granted TTLs are rounded up to a multiple of this (0 =
	// exact).
	TTLGranularity time.Duration
}

// Leases is the lease half of the contract.
type Leases interface {
	// Acquire grants the lease on key to owner for ttl if the key is free or
	// its lease has expired, returning a token greater than every token
	// returned for key before. If the key is held by the same owner (same
	// nonce) the request was a retry of one that was applied: the existing
	// token is returned and the lease is renewed to ttl from now by the
	// backend's clock, as Renew would (an earlier attempt applied late must
	// not leave a lease shorter than this answer implies), with the TTL
	// granted. Otherwise it fails with a *HeldError.
	Acquire(ctx context.Context, key string, owner Owner, ttl time.Duration) (Grant, error)
	// Renew extends the lease held by owner with token to ttl from now (by
	// the backend's clock), keeping the token. ErrLeaseLost if the lease is
	// not held by owner+token or has expired.
	Renew(ctx context.Context, key string, owner Owner, token uint64, ttl time.Duration) (Grant, error)
	// Release clears the holder if owner+token still hold the lease. The
	// token counter is kept. ErrLeaseLost if the lease was not held by
	// owner+token (for the caller, that also means "released").
	Release(ctx context.Context, key string, owner Owner, token uint64) error
	// Get returns the current unexpired lease on key, or ErrNotFound.
	Get(ctx context.Context, key string) (Lease, error)
	// List returns the unexpired leases whose keys start with prefix, in key
	// order, at most limit of them (limit ≤ 0: all).
	List(ctx context.Context, prefix string, limit int) ([]Lease, error)
	// Capabilities describes the backend's guarantees.
	Capabilities() Capabilities
	// Close releases the backend's resources (not the leases).
	Close() error
}

// Notifier is implemented by backends that can push release and expiry
// events. Wait returns a channel that is closed at the latest when key is
// next released or expires after the call, or when ctx ends. It may also be
// closed spuriously; waiters re-check with Acquire.
type Notifier interface {
	Wait(ctx context.Context, key string) (<-chan struct{}, error)
}

// Queue is implemented by backends that can keep a blocked acquirer in
// line on the server, so that a release hands the key to the next in line
// with no write on the hand-over path (ZooKeeper's lock recipe: the waiter's
// node already exists and watches its predecessor). The Locker uses it for
// a blocking Acquire when the backend offers it.
type Queue interface {
	// AcquireQueued blocks until owner holds key or ctx ends, keeping
	// owner's place in the key's line meanwhile. On success it returns the
	// grant and the local instant at which the request that confirmed it
	// was sent: Grant.TTL counts from then, not from the call. When ctx ends
	// first, owner leaves the line and the error wraps ctx's cause; it also
	// wraps ErrNotApplied when leaving was confirmed. Otherwise the backend
	// goes on withdrawing in the background, and a grant that arises
	// meanwhile is released unused. Retries inside the call (a lost
	// connection, a create whose reply was lost) are the backend's; it
	// returns other errors only for bad input (ErrInvalid) and Close
	// (ErrClosed).
	AcquireQueued(ctx context.Context, key string, owner Owner, ttl time.Duration) (Grant, time.Time, error)
}

// Backend is a full backend: leases plus the run ledger. The ledger is
// optional at the seam: a backend that can only keep leases (redlock)
// implements Leases alone, and whoever needs a ledger (the scheduler, the
// daemon, "leasehold runs") asks for one with LedgerOf.
type Backend interface {
	Leases
	Ledger
}

// ErrNoLedger: the backend implements Leases but not Ledger, so it cannot
// keep the scheduler's run ledger.
var ErrNoLedger = errors.New("leasehold/backend: the backend keeps no run ledger")

// LedgerOf returns l as a full Backend when it implements Ledger, and
// otherwise an error wrapping ErrNoLedger that names the backend.
func LedgerOf(l Leases) (Backend, error) {
	if b, ok := l.(Backend); ok {
		return b, nil
	}
	return nil, fmt.Errorf("%w: backend %q implements backend.Leases but not backend.Ledger (jobs and runs need a backend that keeps a run ledger)",
		ErrNoLedger, l.Capabilities().Name)
}
