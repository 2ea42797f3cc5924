package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// The record store (backend.Records): every method is one script over the
// {records} slot, apart from the ledger's keys (see recordLib in
// scripts.go for the layout).

var _ backend.Records = (*Backend)(nil)

func (b *Backend) recordKeys() []string { return []string{b.records + "exp"} }

// recordSeq formats a seq as the 19 digits that order it exactly as text
// (an int64 ≥ 0 has at most 19), for the lexical ranges of a name's index:
// neither Lua numbers nor sorted-set scores are exact beyond 2^53.
func recordSeq(seq int64) string { return fmt.Sprintf("%019d", seq) }

// recordExpires is the stored form of an Expires: its Unix milliseconds,
// or "" for none.
func recordExpires(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(backend.Instant(t).UnixMilli(), 10)
}

// parseRecord builds the record of name from a script's reply fields
// {seq, value, instance, nonce, expires}.
func parseRecord(name string, f []any) (backend.Record, error) {
	if len(f) != 5 {
		return backend.Record{}, fmt.Errorf("malformed record reply %v", f)
	}
	s := make([]string, len(f))
	for i, x := range f {
		v, ok := x.(string)
		if !ok {
			return backend.Record{}, fmt.Errorf("malformed record reply %v", f)
		}
		s[i] = v
	}
	seq, err := strconv.ParseInt(s[0], 10, 64)
	if err != nil {
		return backend.Record{}, fmt.Errorf("record %q: seq %q: %w", name, s[0], err)
	}
	nonce, err := backend.ParseNonce(s[3])
	if err != nil {
		return backend.Record{}, fmt.Errorf("record %q seq %d: %w", name, seq, err)
	}
	r := backend.Record{Name: name, Seq: seq, Value: s[1], Owner: backend.Owner{Instance: s[2], Nonce: nonce}}
	if s[4] != "" {
		ms, err := strconv.ParseInt(s[4], 10, 64)
		if err != nil {
			return backend.Record{}, fmt.Errorf("record %q seq %d: expires %q: %w", name, seq, s[4], err)
		}
		r.Expires = time.UnixMilli(ms).UTC()
	}
	return r, nil
}

// CreateRecord implements backend.Records: one script stores the record
// unless (Name, Seq) is taken, and answers with the record that is there.
func (b *Backend) CreateRecord(ctx context.Context, req backend.CreateRecordRequest) (backend.Record, bool, error) {
	return b.g.CreateRecord(ctx, req, b.createRecord)
}

func (b *Backend) createRecord(ctx context.Context, req backend.CreateRecordRequest) (backend.Record, bool, error) {
	res, err := b.pipe.Do(ctx, createRecordLua, b.recordKeys(), b.records, req.Name, recordSeq(req.Seq), req.Value,
		req.Owner.Instance, req.Owner.Nonce.String(), recordExpires(req.Expires)).Slice()
	if err != nil {
		return backend.Record{}, false, err
	}
	if len(res) == 0 {
		return backend.Record{}, false, fmt.Errorf("unexpected reply %v", res)
	}
	switch toInt(res[0]) {
	case 1:
		return backend.Record{Name: req.Name, Seq: req.Seq, Value: req.Value, Owner: req.Owner, Expires: req.Expires}, true, nil
	case 0:
		r, err := parseRecord(req.Name, res[1:])
		if err != nil {
			return backend.Record{}, false, err
		}
		return r, r.Owner == req.Owner, nil
	}
	return backend.Record{}, false, fmt.Errorf("unexpected reply %v", res)
}

// ListRecords implements backend.Records: one script reads the name's
// index from Before down.
func (b *Backend) ListRecords(ctx context.Context, req backend.ListRecordsRequest) ([]backend.Record, error) {
	return b.g.ListRecords(ctx, req, b.listRecords)
}

// listRecords: req.Limit is effective (the guard made it so).
func (b *Backend) listRecords(ctx context.Context, req backend.ListRecordsRequest) ([]backend.Record, error) {
	hi := "+"
	if req.Before != 0 {
		hi = "(" + recordSeq(req.Before)
	}
	res, err := b.pipe.Do(ctx, listRecordsLua, b.recordKeys(), b.records, req.Name, hi, req.Limit).Slice()
	if err != nil {
		return nil, err
	}
	out := make([]backend.Record, 0, len(res))
	for _, raw := range res {
		f, ok := raw.([]any)
		if !ok {
			return nil, fmt.Errorf("malformed record reply %v", raw)
		}
		r, err := parseRecord(req.Name, f)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// DeleteRecord implements backend.Records: one script deletes the record
// if req.Owner (instance and nonce) created it.
func (b *Backend) DeleteRecord(ctx context.Context, req backend.DeleteRecordRequest) error {
	return b.g.DeleteRecord(ctx, req, b.deleteRecord)
}

func (b *Backend) deleteRecord(ctx context.Context, req backend.DeleteRecordRequest) error {
	n, err := b.pipe.Do(ctx, deleteRecordLua, b.recordKeys(), b.records, req.Name, recordSeq(req.Seq),
		req.Owner.Instance, req.Owner.Nonce.String()).Int64()
	if err != nil {
		return err
	}
	if n != 1 {
		return backend.ErrNotFound
	}
	return nil
}

// PruneRecords implements backend.Records: one script deletes up to batch
// records from the front of the expiry index.
func (b *Backend) PruneRecords(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	return b.g.PruneRecords(ctx, olderThan, batch, b.pruneRecords)
}

func (b *Backend) pruneRecords(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	// Expires (whole ms) < olderThan ⟺ Expires < olderThan rounded up to
	// the ms.
	bound := "(" + strconv.FormatInt(ceilUnit(olderThan, time.Millisecond), 10)
	return b.pipe.Do(ctx, pruneRecordsLua, b.recordKeys(), b.records, bound, batch).Int()
}
