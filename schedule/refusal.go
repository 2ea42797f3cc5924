package schedule

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// Where a version is refused. An instance that refuses its schedule
// version (version.go) says so for as long as it refuses, so that every
// instance, whatever config it runs, can show where the job's replaced
// spec is still deployed: it holds a lease under refusalKey (namespace,
// job and instance), whose owner names the refused version, renewed every
// third of refusalTTL while the job's registration lives and refuses, and
// released when it ends (a reload, a removal, a shutdown) or stops
// refusing. A process that dies stops renewing, and its statement ends
// with the lease. Being a lease, it needs no clean-up and costs nothing
// once it ends; the run ledger holds none of it.

// refusalTTL is the lease of a refusal statement: how long it outlives a
// process that died.
const refusalTTL = 30 * time.Second

// refusalCallWait bounds each lease call of a refusal statement.
const refusalCallWait = 2 * time.Second

// refusalsPrefix is the backend key prefix of every refusal statement in
// namespace (a namespace is a path: it holds no ':'); refusalPrefix the
// statements about job; refusalKey one instance's. A job name is a path,
// which cannot contain MetaSep: the prefix names one job, whatever the
// instance name holds ("/" included), and a key's first MetaSep ends its
// job (parseRefusal).
func refusalsPrefix(namespace string) string {
	return namespace + ":refused:"
}

func refusalPrefix(namespace, job string) string {
	return refusalsPrefix(namespace) + job + backend.MetaSep
}

func refusalKey(namespace, job, instance string) string {
	return refusalPrefix(namespace, job) + instance
}

// Refusal is one instance's refusal of its schedule version for a job.
type Refusal struct {
	Instance string
	Version  string
}

// holdRefusal states that this instance refuses e's version while e's
// registration lives (its ctx) and refuses it, then withdraws it.
func (s *Scheduler) holdRefusal(e *entry) {
	ctx := e.ctx
	key := refusalKey(s.cfg.namespace, e.job.Name, s.cfg.instance)
	owner := backend.Owner{Instance: e.spec.Version(), Nonce: backend.NewNonce()}
	if err := backend.CheckKey("key", key); err != nil {
		// A namespace, job and instance name each within their limits can
		// together exceed the key's.
		s.cfg.logger.Warn("the refusal cannot be stated for other instances to show: its key is invalid", "job", e.job.Name, "err", err)
		return
	}
	var token uint64
	call := func(f func(context.Context) error) error {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refusalCallWait)
		defer cancel()
		return f(cctx)
	}
	for {
		if _, _, refused := e.vc.state(); !refused || ctx.Err() != nil {
			if token != 0 {
				_ = call(func(c context.Context) error { return s.b.Release(c, key, owner, token) })
			}
			return
		}
		var err error
		if token == 0 {
			// Held by another process of this instance name (a restart
			// while the old one's statement lives): taken when it lapses.
			err = call(func(c context.Context) error {
				g, err := s.b.Acquire(c, key, owner, refusalTTL)
				token = g.Token
				return err
			})
		} else {
			err = call(func(c context.Context) error {
				_, err := s.b.Renew(c, backend.RenewRequest{Key: key, Owner: owner, Token: token, TTL: refusalTTL})
				return err
			})
			if errors.Is(err, backend.ErrLeaseLost) {
				token = 0
			}
		}
		if errors.Is(err, backend.ErrInvalid) {
			s.cfg.logger.Warn("the refusal cannot be stated for other instances to show", "job", e.job.Name, "err", err)
			return
		}
		if err != nil && !errors.Is(err, backend.ErrLeaseHeld) {
			s.cfg.logger.Debug("stating where the job's schedule version is refused failed; tried again", "job", e.job.Name, "err", err)
		}
		select {
		case <-ctx.Done():
		case <-s.cfg.clock.After(refusalTTL / 3):
		}
	}
}

// parseRefusal reads the job and the refusal a lease under
// refusalsPrefix(namespace) states; ok is false if its key is not one of
// refusalKey's.
func parseRefusal(namespace string, l backend.Lease) (job string, r Refusal, ok bool) {
	rest, ok := strings.CutPrefix(l.Key, refusalsPrefix(namespace))
	if !ok {
		return "", Refusal{}, false
	}
	job, instance, ok := strings.Cut(rest, backend.MetaSep)
	if !ok || job == "" || instance == "" {
		return "", Refusal{}, false
	}
	return job, Refusal{Instance: instance, Version: l.Owner.Instance}, true
}

// readRefusals reads the refusal statements of namespace under prefix
// with one List, by job, each job's by instance name.
func readRefusals(ctx context.Context, l backend.Leases, namespace, prefix string) (map[string][]Refusal, error) {
	leases, err := l.List(ctx, prefix, 0)
	if err != nil {
		return nil, err
	}
	out := map[string][]Refusal{}
	for _, ls := range leases {
		if job, r, ok := parseRefusal(namespace, ls); ok {
			out[job] = append(out[job], r)
		}
	}
	for _, rs := range out {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Instance < rs[j].Instance })
	}
	return out, nil
}

// ReadAllRefusals returns the instances that state they refuse their
// schedule version of a job in namespace, read from l's leases with one
// List, by job name (a job no instance refuses has no entry), each job's by
// instance name.
func ReadAllRefusals(ctx context.Context, l backend.Leases, namespace string) (map[string][]Refusal, error) {
	return readRefusals(ctx, l, namespace, refusalsPrefix(namespace))
}

// ReadRefusals returns the instances that state they refuse their
// schedule version of job in namespace, read from l's leases, by
// instance name. To read every job's, ReadAllRefusals lists them at once.
func ReadRefusals(ctx context.Context, l backend.Leases, namespace, job string) ([]Refusal, error) {
	byJob, err := readRefusals(ctx, l, namespace, refusalPrefix(namespace, job))
	if err != nil {
		return nil, err
	}
	return byJob[job], nil
}
