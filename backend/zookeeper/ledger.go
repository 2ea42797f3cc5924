package zookeeper

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/backend"
)

// yours answers a retry by the running owner: a write to its runner's
// lease node proves the session alive and restarts the TTL from this
// request's send time. A node this backend does not keep alive (its timer
// fired: the deletion is under way) is not yours any more.
func (b *Backend) yours(o occ, job string, at time.Time, ttl time.Duration) (backend.Grant, error) {
	sent := time.Now()
	r := o.run
	path := b.alivePath(job, at)
	g := b.grantTTL(ttl)
	// Timed from this send time before the write is sent (see extend).
	if o.alive == nil || string(o.alive) != string(aliveValue(r.owner(), r.Token)) || !b.extend(path, o.alive, sent.Add(g)) {
		return backend.Grant{}, fmt.Errorf("%w: %s, token %d: the runner's lease expired", backend.ErrLeaseLost, occurrence(job, at), r.Token)
	}
	if err := b.setOwn(path, o.alive, o.alive, o.aliveVer); err != nil {
		if err == zk.ErrNoNode || err == zk.ErrBadVersion {
			return backend.Grant{}, fmt.Errorf("%w: %s, token %d: the runner's lease expired", backend.ErrLeaseLost, occurrence(job, at), r.Token)
		}
		return backend.Grant{}, b.wrap(err, "renew the runner's lease")
	}
	return backend.Grant{Token: r.Token, TTL: g}, nil
}

// Claim implements backend.Ledger: one multi-op that bumps the job's
// counter (guarded by the job node's version), creates the run and creates
// the runner's ephemeral lease node.
func (b *Backend) Claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	return b.g.Claim(ctx, req, b.claim)
}

func (b *Backend) claim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, error) {
	if ctx.Err() != nil {
		return backend.Grant{}, backend.NotSent(ctx)
	}
	at := backend.Instant(req.ScheduledAt)
	rp, ap, jp := b.runPath(req.Job, at), b.alivePath(req.Job, at), b.jobPath(req.Job)
	for {
		if err := ctx.Err(); err != nil {
			return backend.Grant{}, err
		}
		o, err := b.readOcc(req.Job, at)
		if err != nil {
			return backend.Grant{}, err
		}
		if o.run != nil {
			if o.run.owner() == req.Owner && o.run.State == string(backend.Running) {
				return b.yours(o, req.Job, at, req.TTL)
			}
			return backend.Grant{}, &backend.ClaimedError{Run: o.run.view(o.alive != nil)}
		}
		now := time.Now()
		if at.After(now.Add(req.MaxEarly)) {
			return backend.Grant{}, fmt.Errorf("%w: %s, clock %s, max early %v",
				backend.ErrOccurrenceTooEarly, occurrence(req.Job, at), now.UTC().Format(time.RFC3339Nano), req.MaxEarly)
		}
		if req.MaxLate > 0 && at.Before(now.Add(-req.MaxLate)) {
			return backend.Grant{}, fmt.Errorf("%w: %s, clock %s, max late %v",
				backend.ErrOccurrenceTooLate, occurrence(req.Job, at), now.UTC().Format(time.RFC3339Nano), req.MaxLate)
		}
		j, ver, err := b.readJob(req.Job)
		if err != nil {
			return backend.Grant{}, err
		}
		if ver < 0 {
			if err := b.ensure(jp); err != nil {
				return backend.Grant{}, err
			}
			continue
		}
		if req.MaxRunning > 0 {
			b.hooks.onClaimCount("before")
			n, err := b.countOthers(req.Job, at)
			if err != nil {
				return backend.Grant{}, err
			}
			if n >= req.MaxRunning {
				b.hooks.onClaimCount("after")
				// The count is a later read than the record's: the
				// occurrence may have been claimed (and even finished
				// and pruned) in between. Answer only from a count
				// that provably saw it unclaimed.
				n, ok, err := b.overlapUnclaimed(req.Job, at, req.MaxRunning)
				if err != nil {
					return backend.Grant{}, err
				}
				if !ok {
					continue
				}
				return backend.Grant{}, fmt.Errorf("%w: job %q has %d running, max %d", backend.ErrOccurrenceOverlap, req.Job, n, req.MaxRunning)
			}
		}
		j.Counter++
		if j.High == 0 || at.UnixMilli() > j.High {
			j.High, j.HighVersion = at.UnixMilli(), req.SpecVersion
		}
		alive, g, sent := aliveValue(req.Owner, j.Counter), b.grantTTL(req.TTL), time.Now()
		retry, err := b.multi("", []string{jp + "/alive", rp[:strings.LastIndex(rp, "/")]},
			&zk.SetDataRequest{Path: jp, Data: j.encode(), Version: ver},
			&zk.CreateRequest{Path: rp, Data: newRun(req, j.Counter, 1).encode(), Acl: b.acl},
			&zk.CreateRequest{Path: ap, Data: alive, Acl: b.acl, Flags: zk.FlagEphemeral})
		if err != nil || !retry {
			// Granted, or perhaps (unknown outcome): either way the
			// runner's lease node is timed from this send time, so a
			// retry with this nonce finds it kept alive and is answered
			// "yours", and a node nobody claims again ends at its TTL.
			b.armAt(ap, alive, sent.Add(g))
		}
		if err != nil {
			return backend.Grant{}, err
		}
		if !retry {
			return backend.Grant{Token: j.Counter, TTL: g}, nil
		}
	}
}

// countOthers counts the job's live runner nodes other than the
// occurrence at's own: that one's node is there only if it was claimed
// since its record was read, and then the claim's create fails and the
// answer is that claim's.
func (b *Backend) countOthers(job string, at time.Time) (int, error) {
	names, _, err := b.conn.Children(b.jobPath(job) + "/alive")
	if err != nil && err != zk.ErrNoNode {
		return 0, b.wrap(err, "count running occurrences")
	}
	return len(slices.DeleteFunc(names, func(n string) bool { return n == ms20(at) })), nil
}

// overlapUnclaimed confirms a claim's overlap: the job node's version
// (which every claim and reclaim of the job writes) is read before and
// after the occurrence's absence and the count of the others. Unchanged,
// no claim came in between, so the occurrence was unclaimed when counted
// and the count is that moment's; ok reports that the overlap holds.
func (b *Backend) overlapUnclaimed(job string, at time.Time, maxRunning int) (n int, ok bool, err error) {
	_, v1, err := b.readJob(job)
	if err != nil {
		return 0, false, err
	}
	there, _, err := b.conn.Exists(b.runPath(job, at))
	if err != nil {
		return 0, false, b.wrap(err, "read "+occurrence(job, at))
	}
	if n, err = b.countOthers(job, at); err != nil {
		return 0, false, err
	}
	_, v2, err := b.readJob(job)
	if err != nil {
		return 0, false, err
	}
	return n, v1 == v2 && !there && n >= maxRunning, nil
}

// held checks that owner+token hold the running occurrence unexpired.
func (b *Backend) held(o occ, job string, at time.Time, owner backend.Owner, token uint64) error {
	if o.run == nil || o.alive == nil || string(o.alive) != string(aliveValue(owner, token)) ||
		o.run.State != string(backend.Running) || o.run.owner() != owner || o.run.Token != token {
		return backend.ErrLeaseLost
	}
	return nil
}

// Heartbeat implements backend.Ledger: a guarded write to the runner's
// lease node restarts its TTL.
func (b *Backend) Heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	return b.g.Heartbeat(ctx, req, b.heartbeat)
}

func (b *Backend) heartbeat(ctx context.Context, req backend.HeartbeatRequest) error {
	job, at, owner, token, ttl := req.Job, req.ScheduledAt, req.Owner, req.Token, req.TTL
	if ctx.Err() != nil {
		return backend.NotSent(ctx)
	}
	o, err := b.readOcc(job, at)
	if err != nil {
		return err
	}
	if err := b.held(o, job, at, owner, token); err != nil {
		return err
	}
	_, err = b.yours(o, job, at, ttl)
	return err
}

// Finish implements backend.Ledger.
func (b *Backend) Finish(ctx context.Context, req backend.FinishRequest) error {
	return b.g.Finish(ctx, req, b.finish)
}

func (b *Backend) finish(ctx context.Context, req backend.FinishRequest) error {
	job, at, owner, token, out := req.Job, req.ScheduledAt, req.Owner, req.Token, req.Outcome
	if ctx.Err() != nil {
		return backend.NotSent(ctx)
	}
	for {
		o, err := b.readOcc(job, at)
		if err != nil {
			return err
		}
		if err := b.held(o, job, at, owner, token); err != nil {
			return err
		}
		now := time.Now()
		r := *o.run
		r.State, r.Dur, r.Result, r.Error, r.Finished = string(out.State), int64(out.Duration), out.Result, out.Error, now.UnixNano()
		fp := b.finPath(now, job, at)
		retry, err := b.multi("", []string{fp[:strings.LastIndex(fp, "/")]},
			&zk.SetDataRequest{Path: b.runPath(job, at), Data: r.encode(), Version: o.runVer},
			&zk.DeleteRequest{Path: b.alivePath(job, at), Version: o.aliveVer},
			&zk.CreateRequest{Path: fp, Acl: b.acl})
		if err != nil {
			return err
		}
		if !retry {
			b.disarm(b.alivePath(job, at), aliveValue(owner, token))
			return nil
		}
	}
}

// Reclaim implements backend.Ledger.
func (b *Backend) Reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	return b.g.Reclaim(ctx, req, b.reclaim)
}

func (b *Backend) reclaim(ctx context.Context, req backend.ClaimRequest) (backend.Grant, backend.Run, error) {
	if ctx.Err() != nil {
		return backend.Grant{}, backend.Run{}, backend.NotSent(ctx)
	}
	at := backend.Instant(req.ScheduledAt)
	for {
		if err := ctx.Err(); err != nil {
			return backend.Grant{}, backend.Run{}, err
		}
		o, err := b.readOcc(req.Job, at)
		if err != nil {
			return backend.Grant{}, backend.Run{}, err
		}
		switch {
		case o.run == nil:
			return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: %s was never claimed", backend.ErrNotFound, occurrence(req.Job, at))
		case o.run.State == string(backend.Running) && o.run.owner() == req.Owner:
			g, err := b.yours(o, req.Job, at, req.TTL)
			return g, o.run.view(o.alive != nil), err
		case backend.RunState(o.run.State).Finished():
			return backend.Grant{}, backend.Run{}, &backend.ClaimedError{Run: o.run.view(o.alive != nil)}
		case o.alive != nil:
			return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: %s held by %s", backend.ErrLeaseNotExpired, occurrence(req.Job, at), o.run.Instance)
		case req.MaxAttempts > 0 && o.run.Attempt >= req.MaxAttempts:
			// Attempts only grow, and the multi below writes the run at
			// the version read: the bound is judged on the record it replaces.
			return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: %s ran %d attempts, max %d",
				backend.ErrOccurrenceExhausted, occurrence(req.Job, at), o.run.Attempt, req.MaxAttempts)
		}
		j, ver, err := b.readJob(req.Job)
		if err != nil {
			return backend.Grant{}, backend.Run{}, err
		}
		if req.MaxRunning > 0 {
			// As in Claim: the job's live runner nodes (this one's is gone);
			// the versioned write of the job node fails, and the count is
			// taken again, if another claim or reclaim of the job came first.
			names, _, err := b.conn.Children(b.jobPath(req.Job) + "/alive")
			if err != nil && err != zk.ErrNoNode {
				return backend.Grant{}, backend.Run{}, b.wrap(err, "count running occurrences")
			}
			// Not this one's: a node there now is another reclaim's since
			// its record was read, and the versioned write below fails.
			names = slices.DeleteFunc(names, func(n string) bool { return n == ms20(at) })
			if len(names) >= req.MaxRunning {
				// As in Claim: answer only if the occurrence read before
				// the count is still as read (same run write, no lease).
				if again, err := b.readOcc(req.Job, at); err != nil {
					return backend.Grant{}, backend.Run{}, err
				} else if again.run == nil || again.runZxid != o.runZxid || again.alive != nil {
					continue
				}
				return backend.Grant{}, backend.Run{}, fmt.Errorf("%w: reclaim %s: the job has %d other running, max %d",
					backend.ErrOccurrenceOverlap, occurrence(req.Job, at), len(names), req.MaxRunning)
			}
		}
		j.Counter++
		nr := newRun(req, j.Counter, o.run.Attempt+1)
		alive, g, sent := aliveValue(req.Owner, j.Counter), b.grantTTL(req.TTL), time.Now()
		ap := b.alivePath(req.Job, at)
		retry, err := b.multi("", []string{b.jobPath(req.Job) + "/alive"},
			&zk.SetDataRequest{Path: b.runPath(req.Job, at), Data: nr.encode(), Version: o.runVer},
			&zk.SetDataRequest{Path: b.jobPath(req.Job), Data: j.encode(), Version: ver},
			&zk.CreateRequest{Path: ap, Data: alive, Acl: b.acl, Flags: zk.FlagEphemeral})
		if err != nil || !retry {
			b.armAt(ap, alive, sent.Add(g)) // as in Claim
		}
		if err != nil {
			return backend.Grant{}, backend.Run{}, err
		}
		if !retry {
			return backend.Grant{Token: j.Counter, TTL: g}, nr.view(true), nil
		}
	}
}

// Abandon implements backend.Ledger. Creating and deleting the runner's
// lease node inside the multi-op is the guard that it does not exist.
func (b *Backend) Abandon(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	return b.g.Abandon(ctx, job, at, b.abandon)
}

func (b *Backend) abandon(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	if ctx.Err() != nil {
		return backend.Run{}, backend.NotSent(ctx)
	}
	at = backend.Instant(at)
	for {
		o, err := b.readOcc(job, at)
		if err != nil {
			return backend.Run{}, err
		}
		switch {
		case o.run == nil:
			return backend.Run{}, fmt.Errorf("%w: %s was never claimed", backend.ErrNotFound, occurrence(job, at))
		case backend.RunState(o.run.State).Finished():
			return backend.Run{}, &backend.ClaimedError{Run: o.run.view(o.alive != nil)}
		case o.alive != nil:
			return backend.Run{}, fmt.Errorf("%w: %s held by %s", backend.ErrLeaseNotExpired, occurrence(job, at), o.run.Instance)
		}
		now := time.Now()
		r := *o.run
		r.State, r.Finished = string(backend.Abandoned), now.UnixNano()
		ap, fp := b.alivePath(job, at), b.finPath(now, job, at)
		retry, err := b.multi("", []string{b.jobPath(job) + "/alive", fp[:strings.LastIndex(fp, "/")]},
			&zk.SetDataRequest{Path: b.runPath(job, at), Data: r.encode(), Version: o.runVer},
			&zk.CreateRequest{Path: ap, Acl: b.acl},
			&zk.DeleteRequest{Path: ap, Version: 0},
			&zk.CreateRequest{Path: fp, Acl: b.acl})
		if err != nil {
			return backend.Run{}, err
		}
		if !retry {
			return r.view(false), nil
		}
	}
}

// GetRun implements backend.Ledger.
func (b *Backend) GetRun(ctx context.Context, job string, at time.Time) (backend.Run, error) {
	return b.g.GetRun(ctx, job, at, b.getRun)
}

func (b *Backend) getRun(_ context.Context, job string, at time.Time) (backend.Run, error) {
	o, err := b.readOcc(job, at)
	if err != nil {
		return backend.Run{}, err
	}
	if o.run == nil {
		return backend.Run{}, backend.ErrNotFound
	}
	return o.run.view(o.alive != nil), nil
}

// HighWater implements backend.Ledger.
func (b *Backend) HighWater(ctx context.Context, job string) (time.Time, string, error) {
	return b.g.HighWater(ctx, job, b.highWater)
}

func (b *Backend) highWater(_ context.Context, job string) (time.Time, string, error) {
	j, _, err := b.readJob(job)
	if err != nil || j.High == 0 {
		return time.Time{}, "", err
	}
	return time.UnixMilli(j.High).UTC(), j.HighVersion, nil
}

// children lists path's children, sorted; a missing path has none.
func (b *Backend) children(path string) ([]string, error) {
	names, _, err := b.conn.Children(path)
	if err == zk.ErrNoNode {
		return nil, nil
	}
	if err != nil {
		return nil, b.wrap(err, "list "+path)
	}
	sort.Strings(names)
	return names, nil
}

// ListRuns implements backend.Ledger.
func (b *Backend) ListRuns(ctx context.Context, f backend.RunFilter) ([]backend.Run, error) {
	return b.g.ListRuns(ctx, f, b.listRuns)
}

func (b *Backend) listRuns(_ context.Context, f backend.RunFilter) ([]backend.Run, error) {
	var jobs []string
	if f.Job != "" {
		jobs = []string{escape(f.Job)}
	} else {
		var err error
		if jobs, err = b.children(b.prefix + "/jobs"); err != nil {
			return nil, err
		}
	}
	var out []backend.Run
	for _, ej := range jobs {
		jp := b.prefix + "/jobs/" + ej
		alive, err := b.children(jp + "/alive")
		if err != nil {
			return nil, err
		}
		live := map[string]bool{}
		for _, a := range alive {
			live[a] = true
		}
		b.hooks.onAliveListed(ej)
		hours, err := b.children(jp + "/runs")
		if err != nil {
			return nil, err
		}
		for _, h := range hours {
			names, err := b.children(jp + "/runs/" + h)
			if err != nil {
				return nil, err
			}
			for _, n := range names {
				data, _, err := b.conn.Get(jp + "/runs/" + h + "/" + n)
				if err == zk.ErrNoNode {
					continue
				}
				if err != nil {
					return nil, b.wrap(err, "read a run")
				}
				r, err := decodeRun(data)
				if err != nil {
					return nil, err
				}
				v := r.view(live[n])
				if v.Expired {
					// Running with no lease node in the listing taken
					// before: claimed since, finished since, or truly
					// expired. One snapshot of it tells (readOcc).
					o, err := b.readOcc(r.Job, time.UnixMilli(r.At))
					if err != nil {
						return nil, err
					}
					if o.run == nil {
						continue
					}
					v = o.run.view(o.alive != nil)
				}
				if f.Matches(v) {
					out = append(out, v)
				}
			}
		}
	}
	return f.Page(out), nil
}

// Prune implements backend.Ledger: it walks the finished-run index oldest
// hour first, deletes each run older than olderThan with its index entry,
// and removes hour buckets it empties.
func (b *Backend) Prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	return b.g.Prune(ctx, olderThan, batch, b.prune)
}

func (b *Backend) prune(ctx context.Context, olderThan time.Time, batch int) (int, error) {
	root := b.prefix + "/fin"
	hours, err := b.children(root)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, h := range hours {
		if h > hour(olderThan) {
			break
		}
		names, err := b.children(root + "/" + h)
		if err != nil {
			return n, err
		}
		for _, name := range names {
			if n == batch {
				return n, nil
			}
			if err := ctx.Err(); err != nil {
				return n, err
			}
			fin, rp, ok := b.parseFin(name)
			if !ok || fin >= olderThan.UnixNano() {
				continue
			}
			b.hooks.onPruneEntry(name)
			deleted, err := b.pruneRun(rp, root+"/"+h+"/"+name, fin)
			if err != nil {
				return n, err
			}
			if deleted {
				n++
				_ = b.conn.Delete(rp[:strings.LastIndex(rp, "/")], -1) // fails while not empty
			}
		}
		_ = b.conn.Delete(root+"/"+h, -1) // fails while not empty
	}
	return n, nil
}

// pruneRun deletes the finished run an index entry names together with
// the entry, in one multi-op guarded by the run node's version — and only
// while the run there is the one the entry indexes (finished at fin). A
// Prune listed the entry earlier: another Prune may have deleted that run
// since, and a claim made the occurrence's record again, running; that
// record is not this entry's and is kept (deleting it let a third claim
// win the occurrence beside its runner). A stale entry goes alone.
func (b *Backend) pruneRun(rp, entry string, fin int64) (deleted bool, err error) {
	for {
		data, st, err := b.conn.Get(rp)
		switch {
		case err == zk.ErrNoNode:
		case err != nil:
			return false, b.wrap(err, "read "+rp)
		default:
			r, err := decodeRun(data)
			if err != nil {
				return false, err
			}
			if backend.RunState(r.State).Finished() && r.Finished == fin {
				ops := []any{&zk.DeleteRequest{Path: rp, Version: st.Version}}
				// The entry, if another has not deleted it (a retry
				// must not wait for an entry that is gone for good).
				if there, _, err := b.conn.Exists(entry); err != nil {
					return false, b.wrap(err, "read "+entry)
				} else if there {
					ops = append(ops, &zk.DeleteRequest{Path: entry, Version: -1})
				}
				retry, err := b.multi("prune "+rp, nil, ops...)
				if err != nil {
					return false, err
				}
				if retry {
					continue // changed, or pruned by another: read again
				}
				return true, nil
			}
		}
		if err := b.conn.Delete(entry, -1); err != nil && err != zk.ErrNoNode {
			return false, b.wrap(err, "prune index "+entry)
		}
		return false, nil
	}
}
