package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// The run ledger: every method is one script over the {ledger} slot (see
// scripts.go for the layout). Times come from the server's TIME.

func (b *Backend) ledgerKeys() []string { return []string{b.ledger + "all"} }

func fmtAt(t time.Time) string { return strconv.FormatInt(backend.Instant(t).UnixMilli(), 10) }

func usTime(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// ceilUnit returns t in whole units since the epoch, rounded up.
func ceilUnit(t time.Time, unit time.Duration) int64 {
	per := int64(time.Second / unit)
	s, ns := t.Unix(), int64(t.Nanosecond())
	v := s*per + ns/int64(unit)
	if ns%int64(unit) != 0 {
		v++
	}
	return v
}

// parseRun turns an HGETALL reply into a Run, judging expiry at now (µs).
func parseRun(raw any, now int64) (backend.Run, error) {
	a, ok := raw.([]any)
	if !ok || len(a)%2 != 0 || len(a) == 0 {
		return backend.Run{}, fmt.Errorf("malformed run record %v", raw)
	}
	h := make(map[string]string, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		h[fmt.Sprint(a[i])] = fmt.Sprint(a[i+1])
	}
	num := func(k string) int64 { n, _ := strconv.ParseInt(h[k], 10, 64); return n }
	nonce, err := backend.ParseNonce(h["n"])
	if err != nil {
		return backend.Run{}, fmt.Errorf("run %s@%s: %w", h["j"], h["at"], err)
	}
	tok, _ := strconv.ParseUint(h["t"], 10, 64)
	r := backend.Run{
		Job: h["j"], ScheduledAt: time.UnixMilli(num("at")).UTC(), SpecVersion: h["v"],
		Owner: backend.Owner{Instance: h["i"], Nonce: nonce}, Token: tok, Attempt: int(num("a")),
		State: backend.RunState(h["s"]), ClaimedAt: usTime(num("c")), FinishedAt: usTime(num("f")),
		Duration: time.Duration(num("d")), Result: h["r"], Error: h["e"],
	}
	r.Expired = r.State == backend.Running && now >= num("x")
	return r, nil
}

// Claim implements backend.Ledger.
func (b *Backend) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	return b.g.Claim(ctx, req, b.claim)
}

func (b *Backend) claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	at := backend.Instant(req.ScheduledAt)
	ttl := time.Duration(ttlMS(req.TTL)) * time.Millisecond
	res, err := b.pipe.Do(ctx, claimLua, b.ledgerKeys(), b.ledger, req.Job, fmtAt(at), req.SpecVersion,
		req.Owner.Instance, req.Owner.Nonce.String(), ttl.Microseconds(), req.MaxEarly.Microseconds(), req.MaxRunning,
		int64((req.MaxLate+time.Microsecond-1)/time.Microsecond)).Slice() // rounded up: a bound under 1 µs stays a bound
	if err != nil {
		return backend.Grant{}, err
	}
	switch toInt(res[0]) {
	case 1:
		t, err := toUint(res[1])
		if err != nil {
			return backend.Grant{}, fmt.Errorf("token %v: %w", res[1], err)
		}
		return backend.Grant{Token: t, TTL: ttl}, nil
	case 2:
		r, err := parseRun(res[2], toInt(res[1]))
		if err != nil {
			return backend.Grant{}, err
		}
		return backend.Grant{}, &backend.ClaimedError{Run: r}
	case 3:
		return backend.Grant{}, fmt.Errorf("%w: job %q at %s, backend clock %s, max early %v", backend.ErrOccurrenceTooEarly,
			req.Job, at.Format(time.RFC3339Nano), usTime(toInt(res[1])).Format(time.RFC3339Nano), req.MaxEarly)
	case 4:
		return backend.Grant{}, fmt.Errorf("%w: job %q has %d running, max %d", backend.ErrOccurrenceOverlap, req.Job, toInt(res[1]), req.MaxRunning)
	case 5:
		return backend.Grant{}, fmt.Errorf("%w: job %q at %s, backend clock %s, max late %v", backend.ErrOccurrenceTooLate,
			req.Job, at.Format(time.RFC3339Nano), usTime(toInt(res[1])).Format(time.RFC3339Nano), req.MaxLate)
	}
	return backend.Grant{}, fmt.Errorf("unexpected reply %v", res)
}

// Heartbeat implements backend.Ledger.
func (b *Backend) Heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	return b.g.Heartbeat(ctx, req, b.heartbeat)
}

func (b *Backend) heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	job, at, owner, token, ttl := req.Job, req.ScheduledAt, req.Owner, req.Token, req.TTL
	ttl = time.Duration(ttlMS(ttl)) * time.Millisecond
	n, err := b.pipe.Do(ctx, heartbeatLua, b.ledgerKeys(), b.ledger, job, fmtAt(at), owner.Instance, owner.Nonce.String(),
		strconv.FormatUint(token, 10), ttl.Microseconds()).Int64()
	if err != nil {
		return err
	}
	if n != 1 {
		return backend.ErrLeaseLost
	}
	return nil
}

// Finish implements backend.Ledger. A retry of a Finish that was applied
// (same owner, token and outcome) succeeds.
func (b *Backend) Finish(ctx context.Context, req backend.FinishRequest) error {
	return b.g.Finish(ctx, req, b.finish)
}

func (b *Backend) finish(ctx context.Context, req backend.FinishRequest) error {
	job, at, owner, token, out := req.Job, req.ScheduledAt, req.Owner, req.Token, req.Outcome
	n, err := b.pipe.Do(ctx, finishLua, b.ledgerKeys(), b.ledger, job, fmtAt(at), owner.Instance, owner.Nonce.String(),
		strconv.FormatUint(token, 10), string(out.State), int64(out.Duration), out.Result, out.Error).Int64()
	if err != nil {
		return err
	}
	if n != 1 {
		return backend.ErrLeaseLost
	}
	return nil
}

// Reclaim implements backend.Ledger.
func (b *Backend) Reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	return b.g.Reclaim(ctx, req, b.reclaim)
}

func (b *Backend) reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	at := backend.Instant(req.ScheduledAt)
	ttl := time.Duration(ttlMS(req.TTL)) * time.Millisecond
	res, err := b.pipe.Do(ctx, reclaimLua, b.ledgerKeys(), b.ledger, req.Job, fmtAt(at), req.SpecVersion,
		req.Owner.Instance, req.Owner.Nonce.String(), ttl.Microseconds(), req.MaxRunning, req.MaxAttempts).Slice()
	if err != nil {
		return backend.Grant{}, backend.Run{}, err
	}
	switch toInt(res[0]) {
	case 0:
		return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: job %q at %s was never claimed", backend.ErrNotFound, req.Job, at.Format(time.RFC3339Nano))
	case 1:
		t, err := toUint(res[1])
		if err != nil {
			return backend.Grant{}, backend.Run{}, fmt.Errorf("token %v: %w", res[1], err)
		}
		r, err := parseRun(res[3], toInt(res[2]))
		return backend.Grant{Token: t, TTL: ttl}, r, err
	case 2:
		r, err := parseRun(res[2], toInt(res[1]))
		if err != nil {
			return backend.Grant{}, backend.Run{}, err
		}
		return backend.Grant{}, backend.Run{}, &backend.ClaimedError{Run: r}
	case 3:
		return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: job %q at %s held by %s", backend.ErrLeaseNotExpired, req.Job, at.Format(time.RFC3339Nano), res[1])
	case 4:
		return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: reclaim of job %q at %s: the job has %d other running, max %d",
			backend.ErrOccurrenceOverlap, req.Job, at.Format(time.RFC3339Nano), toInt(res[1]), req.MaxRunning)
	case 5:
		return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: job %q at %s ran %d attempts, max %d",
			backend.ErrOccurrenceExhausted, req.Job, at.Format(time.RFC3339Nano), toInt(res[1]), req.MaxAttempts)
	}
	return backend.Grant{}, backend.Run{}, fmt.Errorf("unexpected reply %v", res)
}

// Abandon implements backend.Ledger.
func (b *Backend) Abandon(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	return b.g.Abandon(ctx, job, at, b.abandon)
}

func (b *Backend) abandon(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	at = backend.Instant(at)
	res, err := b.pipe.Do(ctx, abandonLua, b.ledgerKeys(), b.ledger, job, fmtAt(at)).Slice()
	if err != nil {
		return backend.Run{}, err
	}
	switch toInt(res[0]) {
	case 0:
		return backend.Run{}, fmt.Errorf("%w: job %q at %s was never claimed", backend.ErrNotFound, job, at.Format(time.RFC3339Nano))
	case 1:
		return parseRun(res[2], toInt(res[1]))
	case 2:
		r, err := parseRun(res[2], toInt(res[1]))
		if err != nil {
			return backend.Run{}, err
		}
		return backend.Run{}, &backend.ClaimedError{Run: r}
	case 3:
		return backend.Run{}, fmt.Errorf("%w: job %q at %s held by %s", backend.ErrLeaseNotExpired, job, at.Format(time.RFC3339Nano), res[1])
	}
	return backend.Run{}, fmt.Errorf("unexpected reply %v", res)
}

// GetRun implements backend.Ledger.
func (b *Backend) GetRun(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	return b.g.GetRun(ctx, job, at, b.getRun)
}

func (b *Backend) getRun(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	res, err := b.pipe.Do(ctx, getRunLua, b.ledgerKeys(), b.ledger, job, fmtAt(at)).Slice()
	if err != nil {
		return backend.Run{}, err
	}
	if raw, _ := res[1].([]any); len(raw) == 0 {
		return backend.Run{}, backend.ErrNotFound
	}
	return parseRun(res[1], toInt(res[0]))
}

// HighWater implements backend.Ledger.
func (b *Backend) HighWater(ctx context.Context, job string) (time.Time, string, error) {
	return b.g.HighWater(ctx, job, b.highWater)
}

func (b *Backend) highWater(ctx context.Context, job string) (time.Time, string, error) {
	v, err := b.c.HMGet(ctx, b.ledger+"job:"+job, "h", "v").Result()
	if err != nil {
		return time.Time{}, "", err
	}
	if v[0] == nil {
		return time.Time{}, "", nil
	}
	ms, err := strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("malformed %v", v[0])
	}
	ver, _ := v[1].(string)
	return time.UnixMilli(ms).UTC(), ver, nil
}

// ListRuns implements backend.Ledger. Runs with equal ScheduledAt are in
// job order.
func (b *Backend) ListRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	return b.g.ListRuns(ctx, f, b.listRuns)
}

// listRuns: f.Limit is effective (the guard made it so).
func (b *Backend) listRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	lo, hi := "-inf", "+inf"
	if !f.Since.IsZero() {
		lo = strconv.FormatInt(ceilUnit(f.Since, time.Millisecond), 10)
	}
	if !f.Before.IsZero() {
		hi = "(" + strconv.FormatInt(ceilUnit(f.Before, time.Millisecond), 10)
	}
	limit := f.Limit
	var out []backend.Run
	// Script by script, each reading at most listBudget records (see
	// listRunsScript); each goes on below the instant the last one stopped
	// at, so the calls read disjoint ranges.
	for {
		res, err := b.pipe.Do(ctx, listRunsLua, b.ledgerKeys(), b.ledger, f.Job, string(f.State), lo, hi, limit-len(out), b.listBudget).Slice()
		if err != nil {
			return nil, err
		}
		now := toInt(res[0])
		for _, raw := range res[2:] {
			r, err := parseRun(raw, now)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		resume, _ := res[1].(string)
		if resume == "" || len(out) >= limit {
			break
		}
		hi = "(" + resume
	}
	slices.SortStableFunc(out, func(x, y backend.Run) int {
		if c := y.ScheduledAt.Compare(x.ScheduledAt); c != 0 {
			return c
		}
		if x.Job < y.Job {
			return -1
		}
		if x.Job > y.Job {
			return 1
		}
		return 0
	})
	return out, nil
}

// Prune implements backend.Ledger: deletes finished runs only; counters,
// high-water marks and running occurrences stay.
func (b *Backend) Prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	return b.g.Prune(ctx, olderThan, batch, b.prune)
}

func (b *Backend) prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	n, err := b.pipe.Do(ctx, pruneLua, b.ledgerKeys(), b.ledger, "("+strconv.FormatInt(ceilUnit(olderThan, time.Microsecond), 10), batch).Int()
	if err != nil {
		return 0, err
	}
	return n, nil
}
