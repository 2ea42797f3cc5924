package backend

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Records is a store of small records kept apart from the run ledger: the
// scheduler keeps its job metadata here (schedule versions and their
// superseded marks, pause state, trigger-key uses, retried attempts'
// failures), which earlier releases kept as runs under the ledger's
// reserved names (MetaSep), so that runs and metadata no longer share one
// name space. docs/records.md says how each kind of metadata maps onto it
// and how those runs are carried over.
//
// A record is addressed by a name and a sequence number. Create is
// first-wins: of two creates of one (Name, Seq), exactly one stores its
// record, across clients and processes, and the other is answered with the
// record that is there. A create carries its owner's nonce and is
// idempotent: a retry of a create that was applied (its reply lost) is
// answered "yours". A record never changes once created; it goes only by
// DeleteRecord (its creator's) or, once its Expires has passed, by
// PruneRecords. A record with no Expires stays until deleted, so the newest
// record of a name is a register that nothing but its writers lowers.
type Records interface {
	// CreateRecord stores req's record under (req.Name, req.Seq) unless a
	// record is there. It returns the record stored there and whether it
	// is req's: true when it was stored now, or earlier by a create with
	// the same owner nonce (a retry); false, with the other record, when
	// another owner's record holds the place.
	CreateRecord(ctx context.Context, req CreateRecordRequest) (Record, bool, error)
	// ListRecords returns the records of req.Name with Seq < req.Before
	// (any Seq when req.Before is 0), greatest Seq first, at most
	// req.Limit (DefaultRecordLimit when ≤ 0).
	ListRecords(ctx context.Context, req ListRecordsRequest) ([]Record, error)
	// DeleteRecord deletes the record at (req.Name, req.Seq) if req.Owner
	// (instance and nonce) created it; ErrNotFound if no record of
	// req.Owner's is there (none, or another owner's, which stays). A
	// retry of a delete that was applied therefore answers ErrNotFound.
	DeleteRecord(ctx context.Context, req DeleteRecordRequest) error
	// PruneRecords deletes at most batch records whose Expires is set and
	// before olderThan, returning how many it deleted. Records without
	// Expires are never pruned. Callers loop until it returns fewer than
	// batch, or until their context ends.
	PruneRecords(ctx context.Context, olderThan time.Time, batch int) (int, error)
}

// Record is one record of a Records store.
type Record struct {
	Name    string
	Seq     int64
	Value   string
	Owner   Owner     // who created it
	Expires time.Time // zero: never pruned; else an Instant (UTC, milliseconds)
}

// CreateRecordRequest is the argument of Records.CreateRecord.
type CreateRecordRequest struct {
	Name    string    // a key (CheckKey)
	Seq     int64     // ≥ 0; orders the records of one name
	Value   string    // valid UTF-8 without NUL, at most MaxRecordValueLen bytes
	Owner   Owner     // the creator: its nonce makes a retry idempotent
	Expires time.Time // zero: kept until deleted; else stored as its Instant
}

// ListRecordsRequest is the argument of Records.ListRecords.
type ListRecordsRequest struct {
	Name string
	// Before: only Seq < Before; 0: no bound. As a paging cursor it is the
	// last Seq of the page before; a page that ends at Seq 0 is the last.
	Before int64
	Limit  int // ≤ 0: DefaultRecordLimit
}

// EffectiveLimit returns r.Limit, or DefaultRecordLimit when it is ≤ 0.
func (r ListRecordsRequest) EffectiveLimit() int {
	if r.Limit <= 0 {
		return DefaultRecordLimit
	}
	return r.Limit
}

// DeleteRecordRequest is the argument of Records.DeleteRecord.
type DeleteRecordRequest struct {
	Name  string
	Seq   int64
	Owner Owner
}

const (
	// MaxRecordValueLen bounds a record's value, in bytes.
	MaxRecordValueLen = 32768
	// DefaultRecordLimit is how many records ListRecords returns when the
	// request's Limit is ≤ 0.
	DefaultRecordLimit = 100
)

// CheckRecordName validates a record name (CheckKey, field "record name").
func CheckRecordName(name string) error { return CheckKey("record name", name) }

// CheckRecordSeq validates a record's sequence number: not negative.
func CheckRecordSeq(seq int64) error {
	if seq < 0 {
		return fmt.Errorf("%w: record seq %d is negative", ErrInvalid, seq)
	}
	return nil
}

// CheckCreateRecord validates a create and returns it with Expires made an
// Instant. A value is stored as given, so one that a store could not keep
// exactly (invalid UTF-8, NUL, too long) is refused, not cut.
func CheckCreateRecord(r CreateRecordRequest) (CreateRecordRequest, error) {
	if err := CheckRecordName(r.Name); err != nil {
		return r, err
	}
	if err := CheckRecordSeq(r.Seq); err != nil {
		return r, err
	}
	switch {
	case len(r.Value) > MaxRecordValueLen:
		return r, fmt.Errorf("%w: record value %.40q… is %d bytes, more than the limit of %d", ErrInvalid, r.Value, len(r.Value), MaxRecordValueLen)
	case !utf8.ValidString(r.Value):
		return r, fmt.Errorf("%w: record value %.40q is not valid UTF-8", ErrInvalid, r.Value)
	case strings.IndexByte(r.Value, 0) >= 0:
		return r, fmt.Errorf("%w: record value %.40q contains NUL", ErrInvalid, r.Value)
	}
	if err := CheckOwner(r.Owner); err != nil {
		return r, err
	}
	if !r.Expires.IsZero() {
		if y := r.Expires.UTC().Year(); y < 1970 || y > 9999 {
			return r, fmt.Errorf("%w: record expires %s is outside years 1970–9999", ErrInvalid, r.Expires.UTC().Format(time.RFC3339))
		}
		r.Expires = Instant(r.Expires)
	}
	return r, nil
}

// CheckListRecords validates a listing.
func CheckListRecords(r ListRecordsRequest) error {
	if err := CheckRecordName(r.Name); err != nil {
		return err
	}
	if r.Before < 0 {
		return fmt.Errorf("%w: record listing before %d is negative", ErrInvalid, r.Before)
	}
	return nil
}

// CheckDeleteRecord validates a delete.
func CheckDeleteRecord(r DeleteRecordRequest) error {
	if err := CheckRecordName(r.Name); err != nil {
		return err
	}
	if err := CheckRecordSeq(r.Seq); err != nil {
		return err
	}
	return CheckOwner(r.Owner)
}
