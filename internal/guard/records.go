package guard

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// The record store's calls (backend.Records). A bare ErrNotFound of a call
// about one record is given the record's name and seq.

// CreateRecord checks a create (backend.CheckCreateRecord) and runs step
// with it.
func (g *Guard) CreateRecord(ctx context.Context, req backend.CreateRecordRequest,
	step func(ctx context.Context, req backend.CreateRecordRequest) (backend.Record, bool, error)) (backend.Record, bool, error) {
	req, err := backend.CheckCreateRecord(req)
	if err != nil {
		return backend.Record{}, false, err
	}
	if err := g.closed(); err != nil {
		return backend.Record{}, false, err
	}
	r, mine, err := step(ctx, req)
	return r, mine, g.fail(err, call{op: "create", subject: "record", name: req.Name, seq: req.Seq, hasSeq: true})
}

// ListRecords checks a listing and runs step with its limit made explicit
// (ListRecordsRequest.EffectiveLimit).
func (g *Guard) ListRecords(ctx context.Context, req backend.ListRecordsRequest,
	step func(ctx context.Context, req backend.ListRecordsRequest) ([]backend.Record, error)) ([]backend.Record, error) {
	if err := backend.CheckListRecords(req); err != nil {
		return nil, err
	}
	if err := g.closed(); err != nil {
		return nil, err
	}
	req.Limit = req.EffectiveLimit()
	rs, err := step(ctx, req)
	return rs, g.fail(err, call{op: "list", subject: "record", name: req.Name})
}

// DeleteRecord checks a delete and runs step.
func (g *Guard) DeleteRecord(ctx context.Context, req backend.DeleteRecordRequest,
	step func(ctx context.Context, req backend.DeleteRecordRequest) error) error {
	if err := backend.CheckDeleteRecord(req); err != nil {
		return err
	}
	if err := g.closed(); err != nil {
		return err
	}
	return g.fail(step(ctx, req), call{op: "delete", subject: "record", name: req.Name, seq: req.Seq, hasSeq: true})
}

// PruneRecords checks PruneRecords' arguments (those of Prune) and runs
// step.
func (g *Guard) PruneRecords(ctx context.Context, olderThan time.Time, batch int,
	step func(ctx context.Context, olderThan time.Time, batch int) (int, error)) (int, error) {
	if err := backend.CheckPrune(olderThan, batch); err != nil {
		return 0, err
	}
	if err := g.closed(); err != nil {
		return 0, err
	}
	n, err := step(ctx, olderThan, batch)
	return n, g.fail(err, call{op: "prune", subject: "records"})
}
