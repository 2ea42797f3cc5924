package memory

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// CreateRecord implements backend.Records.
func (b *Backend) CreateRecord(ctx context.Context, req backend.CreateRecordRequest) (backend.Record, bool, error) {
	return b.g.CreateRecord(ctx, req, b.createRecord)
}

func (b *Backend) createRecord(ctx context.Context, req backend.CreateRecordRequest) (backend.Record, bool, error) {
	if ctx.Err() != nil {
		return backend.Record{}, false, backend.NotSent(ctx)
	}
	if err := b.lock(); err != nil {
		return backend.Record{}, false, err
	}
	defer b.mu.Unlock()
	byseq := b.records[req.Name]
	if r, ok := byseq[req.Seq]; ok {
		return r, r.Owner == req.Owner, nil
	}
	if byseq == nil {
		byseq = map[int64]backend.Record{}
		b.records[req.Name] = byseq
	}
	r := backend.Record{Name: req.Name, Seq: req.Seq, Value: req.Value, Owner: req.Owner, Expires: req.Expires}
	byseq[req.Seq] = r
	return r, true, nil
}

// ListRecords implements backend.Records.
func (b *Backend) ListRecords(ctx context.Context, req backend.ListRecordsRequest) ([]backend.Record, error) {
	return b.g.ListRecords(ctx, req, b.listRecords)
}

func (b *Backend) listRecords(ctx context.Context, req backend.ListRecordsRequest) ([]backend.Record, error) {
	if ctx.Err() != nil {
		return nil, backend.NotSent(ctx)
	}
	if err := b.lock(); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	var out []backend.Record
	for seq, r := range b.records[req.Name] {
		if req.Before == 0 || seq < req.Before {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(x, y backend.Record) int { return cmp.Compare(y.Seq, x.Seq) })
	return out[:min(len(out), req.Limit)], nil
}

// DeleteRecord implements backend.Records.
func (b *Backend) DeleteRecord(ctx context.Context, req backend.DeleteRecordRequest) error {
	return b.g.DeleteRecord(ctx, req, b.deleteRecord)
}

func (b *Backend) deleteRecord(ctx context.Context, req backend.DeleteRecordRequest) error {
	if ctx.Err() != nil {
		return backend.NotSent(ctx)
	}
	if err := b.lock(); err != nil {
		return err
	}
	defer b.mu.Unlock()
	byseq := b.records[req.Name]
	if r, ok := byseq[req.Seq]; !ok || r.Owner != req.Owner {
		return backend.ErrNotFound
	}
	delete(byseq, req.Seq)
	if len(byseq) == 0 {
		delete(b.records, req.Name)
	}
	return nil
}

// PruneRecords implements backend.Records.
func (b *Backend) PruneRecords(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	return b.g.PruneRecords(ctx, olderThan, batch, b.pruneRecords)
}

func (b *Backend) pruneRecords(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	if ctx.Err() != nil {
		return 0, backend.NotSent(ctx)
	}
	if err := b.lock(); err != nil {
		return 0, err
	}
	defer b.mu.Unlock()
	n := 0
	for name, byseq := range b.records {
		for seq, r := range byseq {
			if n == batch {
				return n, nil
			}
			if !r.Expires.IsZero() && r.Expires.Before(olderThan) {
				delete(byseq, seq)
				n++
			}
		}
		if len(byseq) == 0 {
			delete(b.records, name)
		}
	}
	return n, nil
}
