package sqlledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// Records is the record store of a SQL backend (backend.Records) written
// once: the steps a backend's guard.Guard runs for CreateRecord,
// ListRecords, DeleteRecord and PruneRecords (the guard checks the
// arguments and the closed state, makes a listing's limit explicit, and
// names failures and the bare backend.ErrNotFound). Each backend fills one
// in at New with what differs: how its writes run (Write), how a create
// learns that the place was taken (Duplicate), and how a prune bounds its
// delete (PruneSQL).
//
// The table (Table) has the columns name (the key), seq, value, instance
// and nonce (the creator, as the runs table stores owners) and expires
// (NULL: never pruned; else an instant, stored as the dialect stores the
// runs' instants: D.Instant and D.ScanInstant), with PRIMARY KEY (name,
// seq) and an index on expires. It is kept apart from the runs: nothing of
// the ledger reads or prunes it.
type Records struct {
	D    *Dialect
	DB   DB   // the pool, for reads
	Gate Gate // the backend's closed state, held while a step runs
	// Table is the records table's (qualified) name.
	Table string
	// Write runs fn, for a caller inside Gate, with a DB for its writes:
	// the pool itself where each statement commits by itself (the server
	// databases; Write may run fn again when the database says that
	// nothing was applied, e.g. a deadlock victim), or one immediate
	// transaction that Write commits when fn returns nil (SQLite). Errors
	// of fn are returned as they are (fn wraps the database's with D.Err);
	// Write wraps its own (begin, commit) with D.Err.
	Write func(ctx context.Context, fn func(q DB) error) error
	// Duplicate, when set, reports whether err is the database's answer
	// that a plain INSERT found the primary key taken (MySQL's 1062):
	// CreateRecord's insert is then a plain INSERT, because MySQL's
	// INSERT IGNORE would also turn other errors (a value too long) into
	// warnings, and an ON DUPLICATE KEY UPDATE that changes nothing is
	// counted as a matched row under clientFoundRows, so neither could
	// tell an insert from a taken place. Nil: the insert is INSERT … ON
	// CONFLICT (name, seq) DO NOTHING, and no row inserted means taken.
	Duplicate func(err error) bool
	// PruneSQL is PruneRecords' statement, whose placeholders take the
	// bound (D.Instant of CeilInstant(olderThan)) and the batch size:
	// deleting at most batch records whose expires is before the bound
	// (the statement differs by what the database can limit and lock; see
	// each backend).
	PruneSQL string
}

// recordCols are the columns scanRecord reads.
const recordCols = `name, seq, value, instance, nonce, expires`

// scanRecord reads a record of recordCols.
func (r *Records) scanRecord(s Scanner) (backend.Record, error) {
	var (
		rec   backend.Record
		nonce []byte
	)
	scanInstant := r.D.ScanInstant
	if scanInstant == nil {
		scanInstant = TimeInstant
	}
	dest, expires := scanInstant()
	if err := s.Scan(&rec.Name, &rec.Seq, &rec.Value, &rec.Owner.Instance, &nonce, dest); err != nil {
		return rec, err
	}
	if err := SetNonce(&rec.Owner.Nonce, nonce); err != nil {
		return rec, err
	}
	if t, ok := expires(); ok {
		rec.Expires = t.UTC()
	}
	return rec, nil
}

// enter is the start of every step: a context that has ended sends
// nothing (backend.NotSent: not applied, matching the context's error and
// not its cause), and the step runs inside Gate; the caller calls
// Gate.Leave when enter returns nil.
func (r *Records) enter(ctx context.Context) error {
	if ctx.Err() != nil {
		return backend.NotSent(ctx)
	}
	return r.Gate.Enter()
}

// CreateRecord is the step of backend.Records' CreateRecord
// (guard.Guard.CreateRecord, which checks req and makes its Expires an
// Instant): first-wins by the primary key (name, seq). The insert either
// stores req's record (answered as stored, and req's) or finds the place
// taken; then the record there is read, and is req's when its owner
// (instance and nonce) is req.Owner: a retried create. A taken place that
// is free again by the read (its record deleted or pruned meanwhile) is
// tried again.
func (r *Records) CreateRecord(ctx context.Context, req backend.CreateRecordRequest) (backend.Record, bool, error) {
	if err := r.enter(ctx); err != nil {
		return backend.Record{}, false, err
	}
	defer r.Gate.Leave()
	var expires any // NULL: never pruned
	if !req.Expires.IsZero() {
		expires = r.D.Instant(req.Expires)
	}
	insert := `INSERT INTO ` + r.Table + ` (` + recordCols + `) VALUES (?, ?, ?, ?, ?, ?)`
	if r.Duplicate == nil {
		insert += ` ON CONFLICT (name, seq) DO NOTHING`
	}
	insert = r.D.Bind(insert)
	get := r.D.Bind(`SELECT ` + recordCols + ` FROM ` + r.Table + ` WHERE name = ? AND seq = ?`)
	mine := backend.Record{Name: req.Name, Seq: req.Seq, Value: req.Value, Owner: req.Owner, Expires: req.Expires}
	for range 10 {
		var (
			stored, found bool
			there         backend.Record
		)
		err := r.Write(ctx, func(q DB) error {
			stored, found = false, false
			n, err := q.Exec(ctx, insert, req.Name, req.Seq, req.Value, req.Owner.Instance, req.Owner.Nonce[:], expires)
			switch {
			case err != nil && r.Duplicate != nil && r.Duplicate(err):
			case err != nil:
				return r.D.Err(ctx, err)
			case n > 0:
				stored = true
				return nil
			}
			// Taken: by a record committed before the insert (which
			// waited for any write of the place in progress), so a
			// statement begun after it reads it.
			there, err = r.scanRecord(q.QueryRow(ctx, get, req.Name, req.Seq))
			switch {
			case errors.Is(err, r.D.NoRows):
				return nil
			case err != nil:
				return r.D.Err(ctx, err)
			}
			found = true
			return nil
		})
		switch {
		case err != nil:
			return backend.Record{}, false, err
		case stored:
			return mine, true, nil
		case found:
			return there, there.Owner == req.Owner, nil
		}
		// The record that held the place was deleted or pruned between
		// the insert and the read: the place is free, try again.
	}
	return backend.Record{}, false, errors.New("no answer after 10 attempts under contention")
}

// ListRecords is the step of backend.Records' ListRecords
// (guard.Guard.ListRecords, which makes req's limit explicit): the
// records of req.Name with seq below req.Before (any, when 0), greatest
// seq first.
func (r *Records) ListRecords(ctx context.Context, req backend.ListRecordsRequest) ([]backend.Record, error) {
	if err := r.enter(ctx); err != nil {
		return nil, err
	}
	defer r.Gate.Leave()
	q := `SELECT ` + recordCols + ` FROM ` + r.Table + ` WHERE name = ?`
	args := []any{req.Name}
	if req.Before > 0 {
		q += ` AND seq < ?`
		args = append(args, req.Before)
	}
	q += fmt.Sprintf(` ORDER BY seq DESC LIMIT %d`, req.Limit)
	rows, err := r.DB.Query(ctx, r.D.Bind(q), args...)
	return collect(ctx, r.D, rows, err, r.scanRecord)
}

// DeleteRecord is the step of backend.Records' DeleteRecord
// (guard.Guard.DeleteRecord): it deletes the record at (req.Name, req.Seq)
// if req.Owner (instance and nonce) created it; the bare
// backend.ErrNotFound when no such record is there (none, or another
// owner's, which stays).
func (r *Records) DeleteRecord(ctx context.Context, req backend.DeleteRecordRequest) error {
	if err := r.enter(ctx); err != nil {
		return err
	}
	defer r.Gate.Leave()
	del := r.D.Bind(`DELETE FROM ` + r.Table + ` WHERE name = ? AND seq = ? AND instance = ? AND nonce = ?`)
	var n int64
	err := r.Write(ctx, func(q DB) error {
		var err error
		if n, err = q.Exec(ctx, del, req.Name, req.Seq, req.Owner.Instance, req.Owner.Nonce[:]); err != nil {
			return r.D.Err(ctx, err)
		}
		return nil
	})
	switch {
	case err != nil:
		return err
	case n == 0:
		return backend.ErrNotFound
	}
	return nil
}

// PruneRecords is the step of backend.Records' PruneRecords
// (guard.Guard.PruneRecords), with PruneSQL: it deletes at most batch
// records whose expires is set and before olderThan (stored instants are
// milliseconds, so before olderThan is before its CeilInstant), and
// returns how many. Records without expires are never touched, nor runs.
func (r *Records) PruneRecords(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	if err := r.enter(ctx); err != nil {
		return 0, err
	}
	defer r.Gate.Leave()
	prune := r.D.Bind(r.PruneSQL)
	var n int64
	err := r.Write(ctx, func(q DB) error {
		var err error
		if n, err = q.Exec(ctx, prune, r.D.Instant(backend.CeilInstant(olderThan)), batch); err != nil {
			return r.D.Err(ctx, err)
		}
		return nil
	})
	return int(n), err
}
