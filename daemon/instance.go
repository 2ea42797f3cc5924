package daemon

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
)

// The instance id. A running daemon holds the lock "instances/<instance>"
// of its namespace, so that a second daemon started with the same id does
// not run beside it. The lease's owner name carries who holds it —
// "<instance>@<host>:<pid>:<start>:<pid namespace>:<boot id>", where start
// is the process's start time in clock ticks since boot (which tells a
// reused pid from the holder) and the pid namespace tells containers that
// share a kernel (and perhaps a host name) apart — because a lease has no other room for it (backend.Owner is a
// name and a nonce) and instance ids cannot contain '@'. An owner name
// longer than backend.MaxInstanceLen is cut back to the instance id, and
// such a holder is never taken over.

// proc identifies a process: the host, its pid, its start time, its pid
// namespace and the host's boot id.
type proc struct {
	host  string
	pid   int
	start uint64
	pidns uint64
	boot  string
}

func (p proc) String() string {
	return fmt.Sprintf("%s:%d:%d:%d:%s", p.host, p.pid, p.start, p.pidns, p.boot)
}

// ownerName is the owner name of the instance lease for instance, run by
// self (if self is known).
func ownerName(instance string, self proc, known bool) string {
	if !known {
		return instance
	}
	if n := instance + "@" + self.String(); len(n) <= backend.MaxInstanceLen {
		return n
	}
	return instance
}

// parseOwner reads an owner name made by ownerName.
func parseOwner(name string) (proc, bool) {
	_, meta, ok := strings.Cut(name, "@")
	if !ok {
		return proc{}, false
	}
	f := strings.Split(meta, ":")
	if len(f) < 5 {
		return proc{}, false
	}
	n := len(f)
	pid, err1 := strconv.Atoi(f[n-4])
	start, err2 := strconv.ParseUint(f[n-3], 10, 64)
	pidns, err3 := strconv.ParseUint(f[n-2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || pid <= 0 || f[n-1] == "" {
		return proc{}, false
	}
	return proc{host: strings.Join(f[:n-4], ":"), pid: pid, start: start, pidns: pidns, boot: f[n-1]}, true
}

// provablyGone reports whether the holder named in owner is a process of
// this host and boot that no longer runs, and why (or why not).
func provablyGone(owner string) (bool, string) {
	p, ok := parseOwner(owner)
	if !ok {
		return false, "the holder does not say which process it is"
	}
	self, known := selfProc()
	switch {
	case !known:
		return false, "this system cannot tell whether another process is alive"
	case p.host != self.host:
		return false, fmt.Sprintf("the holder runs on host %q, not here", p.host)
	case p.boot != self.boot:
		return false, "the holder ran on this host under another boot (boot id), so its pid says nothing"
	case p.pidns != self.pidns:
		return false, "the holder runs in another pid namespace (container), where its pid says nothing here"
	case p.pid == self.pid && p.start == self.start:
		return false, "the holder is this process"
	}
	return processGone(p.pid, p.start)
}

// holdInstance takes the instance id, waiting as long as it takes: while
// another process holds it, it logs who and why it waits and tries again;
// if the holder is a previous process of this host that is gone (killed
// -9, so its lease outlives it), it releases that lease and takes the id
// at once, with a greater token. It returns ctx's error only when ctx ends.
func (d *Daemon) holdInstance(ctx context.Context) (*leasehold.Lock, error) {
	key := instanceKey(d.cfg.Instance)
	var (
		lastHolder string    // the holder last logged, with its token
		lastSaid   time.Time // and when
	)
	tookOver := map[uint64]bool{} // holders' tokens this call released
	for {
		l, err := d.idlk.TryAcquire(ctx, key)
		if err == nil {
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		wait := time.Second
		var held *backend.HeldError
		switch {
		case errors.As(err, &held):
			h := held.Holder
			gone, why := provablyGone(h.Owner.Instance)
			if gone && !tookOver[h.Token] {
				tookOver[h.Token] = true
				d.log.Warn("the instance id is held by a previous process of this daemon that is gone; taking the instance id over",
					"holder", h.Owner.Instance, "holder_token", h.Token, "why", why)
				// Guarded by the dead holder's owner and token: only that
				// grant is cleared, and the next grant's token is greater.
				if rerr := d.b.Release(ctx, h.Key, h.Owner, h.Token); rerr != nil && !errors.Is(rerr, backend.ErrLeaseLost) {
					d.log.Error("releasing the dead holder's instance lease failed; waiting for it to expire", "err", rerr)
				}
				continue
			}
			// Said when the holder changes, and every 30 s while it stays.
			if holder := fmt.Sprintf("%s/%d", h.Owner.Instance, h.Token); holder != lastHolder || time.Since(lastSaid) >= 30*time.Second {
				lastHolder, lastSaid = holder, time.Now()
				d.log.Warn(fmt.Sprintf("%v", fmt.Errorf("%w: %q on %s is held by %s (token %d, lease %v left); %s; waiting until it is released or its lease expires — is another daemon with this instance id running?",
					ErrInstanceAlreadyRunning, d.cfg.Instance, redactURL(d.cfg.Backend), h.Owner.Instance, h.Token, h.Remaining.Round(time.Millisecond), why)))
			}
			if h.Remaining > 0 && h.Remaining < wait {
				wait = h.Remaining + 10*time.Millisecond
			}
		default:
			d.log.Warn("claiming the instance id failed; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}
