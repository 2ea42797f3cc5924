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
// Contract, in short (docs/semantics.md, "Rules that must hold"):
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
//   - A call whose context ends before its reply returns ContextEnded's
//     error: it matches ctx.Err(), never the context's cause nor any other
//     definite answer (ErrLeaseLost, ErrLeaseHeld, …): its outcome is unknown.
//
// # Adding a backend
//
// TestAddingABackend (backend/open) fails until each of these is done:
//
//  1. the package backend/<name>, named as its row: New(client, ...Option)
//     over a client the application owns (Close leaves it open; postgres
//     and mysql take a ctx first) and Open(ctx, url, ...Option), which owns
//     its connection. The exceptions are explained in their packages:
//     memory (New(), Open(ctx, url)), SQLite (Open only: its correctness
//     rests on connection settings), ZooKeeper (New makes and owns the
//     session, whose end releases its locks). It implements Leases, and
//     Ledger (the runs and the record store, Records: docs/records.md)
//     only if it keeps a run ledger (optionally Notifier, Queue,
//     Explainer and ServerClock), each method handing its storage step to
//     an internal/guard Guard, which checks the arguments, answers
//     ErrClosed and names failures for every backend alike; its client
//     library goes in go.mod;
//  2. its conformance_test.go calling conformance.Run;
//  3. one row in backend/open's table (name, schemes, URL form, summary,
//     ledger, open), which Open, "leasehold --help", "leasehold doctor" and
//     the lab's server table are keyed by;
//  4. the starter of a private server for it in the lab's table
//     (internal/chaos/harness, servers.go; a new kind of server program
//     also needs one in internal/testkit/testserver); TestOpenEveryBackend
//     then opens it through every scheme of its row;
//  5. its row in the README's table of backends and, if it keeps a ledger,
//     its URL in the config reference's backend field
//     (daemon/configdocs.go, then go run ./internal/configdoc).
package backend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
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

// Unwrap makes errors.Is(err, ErrLeaseHeld) true.
func (e *HeldError) Unwrap() error { return ErrLeaseHeld }

// Capabilities describes what a backend guarantees. Backends compute it from
// their live configuration where they can read it; such a reading goes
// stale when the server is reconfigured, so those backends implement
// CapabilityRefresher and say when they read it (ReadAt).
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
	// ReadAt is when the server's configuration this declaration rests on
	// was read (by New, or the latest RefreshCapabilities; see
	// CapabilityRefresher). Zero when it rests on nothing that can change
	// while the backend is open. Compare declarations without it.
	ReadAt time.Time
}

// RenewRequest asks Renew to extend the lease on Key held by Owner+Token
// to TTL from now. CheckRenew validates it.
type RenewRequest struct {
	Key   string
	Owner Owner
	Token uint64
	TTL   time.Duration
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
	// Renew extends the lease on req.Key held by req.Owner with req.Token
	// to req.TTL from now (by the backend's clock), keeping the token.
	// ErrLeaseLost if the lease is not held by owner+token or has expired.
	Renew(ctx context.Context, req RenewRequest) (Grant, error)
	// Release clears the holder if owner+token still hold the lease. The
	// token counter is kept. ErrLeaseLost if the lease was not held by
	// owner+token (for the caller, that also means "released").
	Release(ctx context.Context, key string, owner Owner, token uint64) error
	// Get returns the current unexpired lease on key, or ErrNotFound.
	Get(ctx context.Context, key string) (Lease, error)
	// List returns the unexpired leases whose keys start with prefix, in key
	// order, at most limit of them (limit ≤ 0: all). It is a view for
	// people, not a judgement of one key: on PostgreSQL and MySQL it reads a
	// snapshot, so a lease whose renewal is being committed as its old
	// expiry passes can be missing from it (Get waits for that renewal).
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

// LedgerOf returns l as a full Backend when it implements Ledger, and
// otherwise an error wrapping ErrNoLedger that names the backend.
func LedgerOf(l Leases) (Backend, error) {
	if b, ok := l.(Backend); ok {
		return b, nil
	}
	return nil, fmt.Errorf("%w: backend %q implements backend.Leases but not backend.Ledger (jobs and runs need a backend that keeps a run ledger)",
		ErrNoLedger, l.Capabilities().Name)
}
