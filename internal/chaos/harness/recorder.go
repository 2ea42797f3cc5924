package harness

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/chaos/history"
)

// recorder wraps a backend and writes every lease and ledger write
// operation to the history: a call event before it is sent and a return
// event with its outcome after. Reads pass through unrecorded.
type recorder struct {
	backend.Backend
	h *history.Writer
}

// OccurrenceKey is how occurrences are keyed in histories and at the sink:
// job@unix-milliseconds.
func OccurrenceKey(job string, at time.Time) string {
	return job + "@" + strconv.FormatInt(at.UnixMilli(), 10)
}

func (r *recorder) call(kind, key string, o backend.Owner, token uint64, ttl time.Duration) uint64 {
	id := r.h.NextOp()
	r.h.Write(history.Event{Op: id, Phase: history.Call, Kind: kind, Key: key, Owner: o.String(), Token: token, TTL: int64(ttl)})
	return id
}

func (r *recorder) ret(id uint64, kind, key string, o backend.Owner, token uint64, ttl time.Duration, attempt int, err error) {
	e := history.Event{Op: id, Phase: history.Return, Kind: kind, Key: key, Owner: o.String(), Token: token, TTL: int64(ttl), Attempt: attempt}
	e.Result = classify(err)
	var he *backend.HeldError
	var ce *backend.ClaimedError
	switch {
	case errors.As(err, &he):
		e.HeldToken = he.Holder.Token
	case errors.As(err, &ce):
		e.HeldToken = ce.Run.Token
	}
	if err != nil {
		e.Detail = err.Error()
		if len(e.Detail) > 300 {
			e.Detail = e.Detail[:300]
		}
	}
	r.h.Write(e)
}

// classify maps a backend error to a history result. Anything the contract
// does not name as a definite answer is indeterminate: it may have been
// applied.
func classify(err error) string {
	switch {
	case err == nil:
		return history.OK
	case errors.Is(err, backend.ErrNotApplied):
		// Never sent (backend.NotSent: it quotes the context's cause, such
		// as a lock's ErrLeaseLost, without matching it): nothing was asked
		// of the backend.
		return history.Refused
	case errors.Is(err, backend.ErrLeaseHeld):
		return history.Held
	case errors.Is(err, backend.ErrLeaseLost):
		return history.Lost
	case errors.Is(err, backend.ErrOccurrenceClaimed):
		return history.Claimed
	case errors.Is(err, backend.ErrLeaseNotExpired), errors.Is(err, backend.ErrOccurrenceTooEarly), errors.Is(err, backend.ErrOccurrenceTooLate), errors.Is(err, backend.ErrOccurrenceOverlap),
		errors.Is(err, backend.ErrInvalid), errors.Is(err, backend.ErrNotFound), errors.Is(err, backend.ErrOccurrenceExhausted):
		return history.Refused
	default:
		return history.Indeterminate
	}
}

func (r *recorder) Acquire(ctx context.Context, key string, o backend.Owner, ttl time.Duration) (backend.Grant, error) {
	id := r.call(history.Acquire, key, o, 0, ttl)
	g, err := r.Backend.Acquire(ctx, key, o, ttl)
	r.ret(id, history.Acquire, key, o, g.Token, g.TTL, 0, err)
	return g, err
}

func (r *recorder) Renew(ctx context.Context, req backend.RenewRequest) (backend.Grant, error) {
	id := r.call(history.Renew, req.Key, req.Owner, req.Token, req.TTL)
	g, err := r.Backend.Renew(ctx, req)
	r.ret(id, history.Renew, req.Key, req.Owner, req.Token, g.TTL, 0, err)
	return g, err
}

func (r *recorder) Release(ctx context.Context, key string, o backend.Owner, token uint64) error {
	id := r.call(history.Release, key, o, token, 0)
	err := r.Backend.Release(ctx, key, o, token)
	r.ret(id, history.Release, key, o, token, 0, 0, err)
	return err
}

func (r *recorder) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	key := OccurrenceKey(req.Job, req.ScheduledAt)
	id := r.call(history.Claim, key, req.Owner, 0, req.TTL)
	g, err := r.Backend.Claim(ctx, req)
	r.ret(id, history.Claim, key, req.Owner, g.Token, g.TTL, 1, err)
	return g, err
}

func (r *recorder) Reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	key := OccurrenceKey(req.Job, req.ScheduledAt)
	id := r.call(history.Reclaim, key, req.Owner, 0, req.TTL)
	g, run, err := r.Backend.Reclaim(ctx, req)
	r.ret(id, history.Reclaim, key, req.Owner, g.Token, g.TTL, run.Attempt, err)
	return g, run, err
}

func (r *recorder) Heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	key := OccurrenceKey(req.Job, req.ScheduledAt)
	id := r.call(history.Heartbeat, key, req.Owner, req.Token, req.TTL)
	err := r.Backend.Heartbeat(ctx, req)
	r.ret(id, history.Heartbeat, key, req.Owner, req.Token, req.TTL, 0, err)
	return err
}

func (r *recorder) Finish(ctx context.Context, req backend.FinishRequest) error {
	key := OccurrenceKey(req.Job, req.ScheduledAt)
	id := r.call(history.Finish, key, req.Owner, req.Token, 0)
	err := r.Backend.Finish(ctx, req)
	r.ret(id, history.Finish, key, req.Owner, req.Token, 0, 0, err)
	return err
}

// recordingNotifier is a recorder over a backend that pushes release events.
type recordingNotifier struct {
	*recorder
	n backend.Notifier
}

func (r recordingNotifier) Wait(ctx context.Context, key string) (<-chan struct{}, error) {
	return r.n.Wait(ctx, key)
}

// record wraps b so that its operations are written to h, keeping its
// Notifier if it has one.
func record(b backend.Backend, h *history.Writer) backend.Backend {
	r := &recorder{Backend: b, h: h}
	if n, ok := b.(backend.Notifier); ok {
		return recordingNotifier{recorder: r, n: n}
	}
	return r
}
