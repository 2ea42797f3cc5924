// Package faultbackend is the one scriptable fault backend of the tests:
// Backend wraps a real backend.Backend (Next) and lets a test replace any
// call with a middleware of its own, which may delay it, fail it, lose its
// reply, count it, or forward it (next) and change what comes back.
//
//	fb := &faultbackend.Backend{Next: memory.New(),
//		OnAcquire: func(ctx context.Context, next faultbackend.AcquireFunc, key string, o backend.Owner, ttl time.Duration) (backend.Grant, error) {
//			<-ctx.Done() // a request never sent
//			return backend.Grant{}, fmt.Errorf("queued: %w: %w", backend.ErrNotApplied, ctx.Err())
//		}}
//
// A nil On<Method> forwards the call to Next unchanged. Capabilities and
// Close always forward. OnCall, when set, runs first in every other call,
// whatever the method: a fault of the whole backend (a process that died,
// a backend cut off) rather than of one call.
//
// Backend's method set is exactly backend.Backend's (Leases + Ledger), as
// for a struct that embeds backend.Backend: the optional interfaces of the
// backend it wraps (Notifier, Queue, Explainer, CapabilityRefresher,
// ServerClock) are hidden, so the code under test takes its paths for a
// backend without them.
//
// The middlewares run on the callers' goroutines, concurrently when the
// code under test calls concurrently: state they share goes behind a
// mutex or in atomics, as in any test double. Set them before the Backend
// is used; they are read without a lock.
package faultbackend

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// The calls a middleware receives as next: the wrapped backend's method.
type (
	AcquireFunc   func(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error)
	RenewFunc     func(ctx context.Context, req backend.RenewRequest) (backend.Grant, error)
	ReleaseFunc   func(ctx context.Context, key string, owner backend.Owner, token uint64) error
	GetFunc       func(ctx context.Context, key string) (backend.Lease, error)
	ListFunc      func(ctx context.Context, prefix string, limit int) ([]backend.Lease, error)
	ClaimFunc     func(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error)
	HeartbeatFunc func(ctx context.Context, req backend.HeartbeatRequest) error
	FinishFunc    func(ctx context.Context, req backend.FinishRequest) error
	ReclaimFunc   func(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error)
	AbandonFunc   func(ctx context.Context, job string, scheduledAt time.Time) (backend.Run, error)
	GetRunFunc    func(ctx context.Context, job string, scheduledAt time.Time) (backend.Run, error)
	HighWaterFunc func(ctx context.Context, job string) (time.Time, string, error)
	ListRunsFunc  func(ctx context.Context, f backend.RunFilter) ([]backend.Run, error)
	PruneFunc     func(ctx context.Context, olderThan time.Time, batch int) (int, error)

	CreateRecordFunc func(ctx context.Context, req backend.CreateRecordRequest) (backend.Record, bool, error)
	ListRecordsFunc  func(ctx context.Context, req backend.ListRecordsRequest) ([]backend.Record, error)
	DeleteRecordFunc func(ctx context.Context, req backend.DeleteRecordRequest) error
	PruneRecordsFunc func(ctx context.Context, olderThan time.Time, batch int) (int, error)
)

// Backend is a backend.Backend that runs each call through OnCall, when
// set, and then its On<Method> middleware, when set, or else straight to
// Next.
type Backend struct {
	Next backend.Backend

	// OnCall runs before every call but Capabilities and Close, with the
	// method's name ("Acquire", "Claim", ...). A non-nil error is the
	// call's answer, and the call goes no further (neither its On<Method>
	// nor Next runs); nil lets it go on.
	OnCall func(ctx context.Context, method string) error

	OnAcquire   func(ctx context.Context, next AcquireFunc, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error)
	OnRenew     func(ctx context.Context, next RenewFunc, req backend.RenewRequest) (backend.Grant, error)
	OnRelease   func(ctx context.Context, next ReleaseFunc, key string, owner backend.Owner, token uint64) error
	OnGet       func(ctx context.Context, next GetFunc, key string) (backend.Lease, error)
	OnList      func(ctx context.Context, next ListFunc, prefix string, limit int) ([]backend.Lease, error)
	OnClaim     func(ctx context.Context, next ClaimFunc, req backend.ClaimRequest) (backend.Grant, error)
	OnHeartbeat func(ctx context.Context, next HeartbeatFunc, req backend.HeartbeatRequest) error
	OnFinish    func(ctx context.Context, next FinishFunc, req backend.FinishRequest) error
	OnReclaim   func(ctx context.Context, next ReclaimFunc, req backend.ClaimRequest) (backend.Grant, backend.Run, error)
	OnAbandon   func(ctx context.Context, next AbandonFunc, job string, scheduledAt time.Time) (backend.Run, error)
	OnGetRun    func(ctx context.Context, next GetRunFunc, job string, scheduledAt time.Time) (backend.Run, error)
	OnHighWater func(ctx context.Context, next HighWaterFunc, job string) (time.Time, string, error)
	OnListRuns  func(ctx context.Context, next ListRunsFunc, f backend.RunFilter) ([]backend.Run, error)
	OnPrune     func(ctx context.Context, next PruneFunc, olderThan time.Time, batch int) (int, error)

	OnCreateRecord func(ctx context.Context, next CreateRecordFunc, req backend.CreateRecordRequest) (backend.Record, bool, error)
	OnListRecords  func(ctx context.Context, next ListRecordsFunc, req backend.ListRecordsRequest) ([]backend.Record, error)
	OnDeleteRecord func(ctx context.Context, next DeleteRecordFunc, req backend.DeleteRecordRequest) error
	OnPruneRecords func(ctx context.Context, next PruneRecordsFunc, olderThan time.Time, batch int) (int, error)
}

var _ backend.Backend = (*Backend)(nil)

// Acquire runs OnAcquire, or Next.Acquire when OnAcquire is nil.
func (b *Backend) Acquire(ctx context.Context, key string, owner backend.Owner, ttl time.Duration) (backend.Grant, error) {
	if err := b.call(ctx, "Acquire"); err != nil {
		return backend.Grant{}, err
	}
	if b.OnAcquire != nil {
		return b.OnAcquire(ctx, b.Next.Acquire, key, owner, ttl)
	}
	return b.Next.Acquire(ctx, key, owner, ttl)
}

// Renew runs OnRenew, or Next.Renew when OnRenew is nil.
func (b *Backend) Renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	if err := b.call(ctx, "Renew"); err != nil {
		return backend.Grant{}, err
	}
	if b.OnRenew != nil {
		return b.OnRenew(ctx, b.Next.Renew, req)
	}
	return b.Next.Renew(ctx, req)
}

// Release runs OnRelease, or Next.Release when OnRelease is nil.
func (b *Backend) Release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	if err := b.call(ctx, "Release"); err != nil {
		return err
	}
	if b.OnRelease != nil {
		return b.OnRelease(ctx, b.Next.Release, key, owner, token)
	}
	return b.Next.Release(ctx, key, owner, token)
}

// Get runs OnGet, or Next.Get when OnGet is nil.
func (b *Backend) Get(ctx context.Context, key string) (backend.Lease, error) {
	if err := b.call(ctx, "Get"); err != nil {
		return backend.Lease{}, err
	}
	if b.OnGet != nil {
		return b.OnGet(ctx, b.Next.Get, key)
	}
	return b.Next.Get(ctx, key)
}

// List runs OnList, or Next.List when OnList is nil.
func (b *Backend) List(ctx context.Context, prefix string, limit int) ([]backend.Lease, error) {
	if err := b.call(ctx, "List"); err != nil {
		return nil, err
	}
	if b.OnList != nil {
		return b.OnList(ctx, b.Next.List, prefix, limit)
	}
	return b.Next.List(ctx, prefix, limit)
}

// Capabilities forwards to Next.
func (b *Backend) Capabilities() backend.Capabilities { return b.Next.Capabilities() }

// Close forwards to Next.
func (b *Backend) Close() error { return b.Next.Close() }

// Claim runs OnClaim, or Next.Claim when OnClaim is nil.
func (b *Backend) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	if err := b.call(ctx, "Claim"); err != nil {
		return backend.Grant{}, err
	}
	if b.OnClaim != nil {
		return b.OnClaim(ctx, b.Next.Claim, req)
	}
	return b.Next.Claim(ctx, req)
}

// Heartbeat runs OnHeartbeat, or Next.Heartbeat when OnHeartbeat is nil.
func (b *Backend) Heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	if err := b.call(ctx, "Heartbeat"); err != nil {
		return err
	}
	if b.OnHeartbeat != nil {
		return b.OnHeartbeat(ctx, b.Next.Heartbeat, req)
	}
	return b.Next.Heartbeat(ctx, req)
}

// Finish runs OnFinish, or Next.Finish when OnFinish is nil.
func (b *Backend) Finish(ctx context.Context, req backend.FinishRequest) error {
	if err := b.call(ctx, "Finish"); err != nil {
		return err
	}
	if b.OnFinish != nil {
		return b.OnFinish(ctx, b.Next.Finish, req)
	}
	return b.Next.Finish(ctx, req)
}

// Reclaim runs OnReclaim, or Next.Reclaim when OnReclaim is nil.
func (b *Backend) Reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	if err := b.call(ctx, "Reclaim"); err != nil {
		return backend.Grant{}, backend.Run{}, err
	}
	if b.OnReclaim != nil {
		return b.OnReclaim(ctx, b.Next.Reclaim, req)
	}
	return b.Next.Reclaim(ctx, req)
}

// Abandon runs OnAbandon, or Next.Abandon when OnAbandon is nil.
func (b *Backend) Abandon(ctx context.Context, job string, scheduledAt time.Time) (backend.Run, error) {
	if err := b.call(ctx, "Abandon"); err != nil {
		return backend.Run{}, err
	}
	if b.OnAbandon != nil {
		return b.OnAbandon(ctx, b.Next.Abandon, job, scheduledAt)
	}
	return b.Next.Abandon(ctx, job, scheduledAt)
}

// GetRun runs OnGetRun, or Next.GetRun when OnGetRun is nil.
func (b *Backend) GetRun(ctx context.Context, job string, scheduledAt time.Time) (backend.Run, error) {
	if err := b.call(ctx, "GetRun"); err != nil {
		return backend.Run{}, err
	}
	if b.OnGetRun != nil {
		return b.OnGetRun(ctx, b.Next.GetRun, job, scheduledAt)
	}
	return b.Next.GetRun(ctx, job, scheduledAt)
}

// HighWater runs OnHighWater, or Next.HighWater when OnHighWater is nil.
func (b *Backend) HighWater(ctx context.Context, job string) (time.Time, string, error) {
	if err := b.call(ctx, "HighWater"); err != nil {
		return time.Time{}, "", err
	}
	if b.OnHighWater != nil {
		return b.OnHighWater(ctx, b.Next.HighWater, job)
	}
	return b.Next.HighWater(ctx, job)
}

// ListRuns runs OnListRuns, or Next.ListRuns when OnListRuns is nil.
func (b *Backend) ListRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	if err := b.call(ctx, "ListRuns"); err != nil {
		return nil, err
	}
	if b.OnListRuns != nil {
		return b.OnListRuns(ctx, b.Next.ListRuns, f)
	}
	return b.Next.ListRuns(ctx, f)
}

// Prune runs OnPrune, or Next.Prune when OnPrune is nil.
func (b *Backend) Prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	if err := b.call(ctx, "Prune"); err != nil {
		return 0, err
	}
	if b.OnPrune != nil {
		return b.OnPrune(ctx, b.Next.Prune, olderThan, batch)
	}
	return b.Next.Prune(ctx, olderThan, batch)
}

// call runs OnCall, when set, for a call of method.
func (b *Backend) call(ctx context.Context, method string) error {
	if b.OnCall == nil {
		return nil
	}
	return b.OnCall(ctx, method)
}

// CreateRecord runs OnCreateRecord, or Next.CreateRecord when it is nil.
func (b *Backend) CreateRecord(ctx context.Context, req backend.CreateRecordRequest) (backend.Record, bool, error) {
	if err := b.call(ctx, "CreateRecord"); err != nil {
		return backend.Record{}, false, err
	}
	if b.OnCreateRecord != nil {
		return b.OnCreateRecord(ctx, b.Next.CreateRecord, req)
	}
	return b.Next.CreateRecord(ctx, req)
}

// ListRecords runs OnListRecords, or Next.ListRecords when it is nil.
func (b *Backend) ListRecords(ctx context.Context, req backend.ListRecordsRequest) ([]backend.Record, error) {
	if err := b.call(ctx, "ListRecords"); err != nil {
		return nil, err
	}
	if b.OnListRecords != nil {
		return b.OnListRecords(ctx, b.Next.ListRecords, req)
	}
	return b.Next.ListRecords(ctx, req)
}

// DeleteRecord runs OnDeleteRecord, or Next.DeleteRecord when it is nil.
func (b *Backend) DeleteRecord(ctx context.Context, req backend.DeleteRecordRequest) error {
	if err := b.call(ctx, "DeleteRecord"); err != nil {
		return err
	}
	if b.OnDeleteRecord != nil {
		return b.OnDeleteRecord(ctx, b.Next.DeleteRecord, req)
	}
	return b.Next.DeleteRecord(ctx, req)
}

// PruneRecords runs OnPruneRecords, or Next.PruneRecords when it is nil.
func (b *Backend) PruneRecords(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	if err := b.call(ctx, "PruneRecords"); err != nil {
		return 0, err
	}
	if b.OnPruneRecords != nil {
		return b.OnPruneRecords(ctx, b.Next.PruneRecords, olderThan, batch)
	}
	return b.Next.PruneRecords(ctx, olderThan, batch)
}
