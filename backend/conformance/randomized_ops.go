package conformance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/model"
)

// leaseStep makes one random lease request: with a lease, renew, release,
// read or forget it (it then expires); without one, acquire or read a key.
func (c *client) leaseStep() {
	if l := c.lease; l != nil {
		switch r := c.rng.IntN(100); {
		case r < 40:
			c.renew(l)
		case r < 80:
			c.release(l)
		case r < 95:
			c.get(l.key)
		default:
			c.lease = nil
		}
		return
	}
	key := fmt.Sprintf("rnd/k%d", c.rng.IntN(rndKeys))
	if c.rng.IntN(10) < 3 {
		c.get(key)
		return
	}
	c.acquire(key, owner(fmt.Sprintf("c%d", c.id)), c.ttl())
}

// acquire asks for key, retrying (same owner nonce) while the outcome is
// unknown.
func (c *client) acquire(key string, o backend.Owner, ttl time.Duration) {
	for range rndRetries + 1 {
		var g backend.Grant
		var res string
		c.do(true, false, func(ctx context.Context) (err error) {
			g, err = c.w.leases.Acquire(ctx, key, o, ttl)
			return err
		}, func(err error, call, ret int64) porcupine.Operation {
			res = c.result("acquire", err)
			out := model.LeaseOutput{Result: res}
			if res == model.OK {
				out.Token, out.TTL, out.Holder = g.Token, int64(g.TTL), o.String()
			}
			var he *backend.HeldError
			if errors.As(err, &he) {
				out.HeldToken = he.Holder.Token
				if !he.Holder.Owner.Nonce.IsZero() {
					out.Holder = he.Holder.Owner.String()
				}
			}
			return porcupine.Operation{Input: model.LeaseInput{Kind: model.Acquire, Key: key, Owner: o.String(), TTL: int64(ttl), Call: call, Ret: ret}, Output: out}
		})
		switch res {
		case model.OK:
			c.lease = &heldLease{key: key, owner: o, token: g.Token, ttl: ttl}
			return
		case model.Indeterminate:
			continue
		default:
			return
		}
	}
}

func (c *client) renew(l *heldLease) {
	var g backend.Grant
	var res string
	c.do(false, false, func(ctx context.Context) (err error) {
		g, err = c.w.leases.Renew(ctx, backend.RenewRequest{Key: l.key, Owner: l.owner, Token: l.token, TTL: l.ttl})
		return err
	}, func(err error, call, ret int64) porcupine.Operation {
		res = c.result("renew", err)
		return porcupine.Operation{
			Input:  model.LeaseInput{Kind: model.Renew, Key: l.key, Owner: l.owner.String(), Token: l.token, TTL: int64(l.ttl), Call: call, Ret: ret},
			Output: model.LeaseOutput{Result: res, TTL: int64(g.TTL)}}
	})
	if res == model.Lost {
		c.lease = nil
	}
}

func (c *client) release(l *heldLease) {
	c.do(false, false, func(ctx context.Context) error {
		return c.w.leases.Release(ctx, l.key, l.owner, l.token)
	}, func(err error, call, ret int64) porcupine.Operation {
		return porcupine.Operation{
			Input:  model.LeaseInput{Kind: model.Release, Key: l.key, Owner: l.owner.String(), Token: l.token, Call: call, Ret: ret},
			Output: model.LeaseOutput{Result: c.result("release", err)}}
	})
	c.lease = nil // released, lost, or unknown: not used again
}

func (c *client) get(key string) {
	var l backend.Lease
	c.do(false, false, func(ctx context.Context) (err error) {
		l, err = c.w.leases.Get(ctx, key)
		return err
	}, func(err error, call, ret int64) porcupine.Operation {
		out := model.LeaseOutput{Result: c.result("get", err)}
		if out.Result == model.OK {
			out.Token, out.Holder = l.Token, l.Owner.String()
		}
		return porcupine.Operation{Input: model.LeaseInput{Kind: model.Get, Key: key, Call: call, Ret: ret}, Output: out}
	})
}

// ledgerStep makes one random ledger request: with a claim, heartbeat,
// finish or forget it; without one, claim, reclaim or abandon an
// occurrence, or prune.
func (c *client) ledgerStep() {
	if cl := c.claim; cl != nil {
		switch r := c.rng.IntN(100); {
		case r < 45:
			c.heartbeat(cl)
		case r < 92:
			c.finish(cl)
		default:
			c.claim = nil
		}
		return
	}
	job, occ := c.rng.IntN(len(c.w.jobs)), c.rng.IntN(rndOccurrences)
	switch r := c.rng.IntN(100); {
	case r < 55:
		c.claimOcc(model.Claim, job, occ)
	case r < 75:
		c.claimOcc(model.Reclaim, job, occ)
	case r < 95:
		c.abandon(job, occ)
	default:
		c.prune()
	}
}

func (c *client) ledgerInput(kind string, job, occ int) model.LedgerInput {
	return model.LedgerInput{Kind: kind, Job: c.w.jobs[job].name, Occurrence: occ, MaxRunning: c.w.jobs[job].maxRunning}
}

// recordToken is the token of the record a *ClaimedError carries.
func recordToken(err error) uint64 {
	var ce *backend.ClaimedError
	if errors.As(err, &ce) {
		return ce.Run.Token
	}
	return 0
}

// claimOcc claims or reclaims an occurrence, retrying (same owner nonce)
// while the outcome is unknown.
func (c *client) claimOcc(kind string, job, occ int) {
	o := owner(fmt.Sprintf("c%d", c.id))
	ttl := c.ttl()
	req := backend.ClaimRequest{Job: c.w.jobs[job].name, ScheduledAt: c.w.instants[occ], SpecVersion: "v1", Owner: o, TTL: ttl,
		MaxEarly: time.Minute, MaxRunning: c.w.jobs[job].maxRunning}
	for range rndRetries + 1 {
		var g backend.Grant
		var res string
		c.do(true, true, func(ctx context.Context) (err error) {
			if kind == model.Claim {
				g, err = c.w.ledger.Claim(ctx, req)
			} else {
				g, err = c.w.ledger.Reclaim(ctx, req)
			}
			return err
		}, func(err error, call, ret int64) porcupine.Operation {
			res = c.result(kind, err)
			in := c.ledgerInput(kind, job, occ)
			in.Owner, in.TTL, in.Call, in.Ret = o.String(), int64(ttl), call, ret
			out := model.LedgerOutput{Result: res, RecordToken: recordToken(err)}
			if res == model.OK {
				out.Token, out.TTL = g.Token, int64(g.TTL)
			}
			return porcupine.Operation{Input: in, Output: out}
		})
		switch res {
		case model.OK:
			c.claim = &heldClaim{job: job, occ: occ, owner: o, token: g.Token, ttl: ttl}
			return
		case model.Indeterminate:
			continue
		default:
			return
		}
	}
}

func (c *client) heartbeat(cl *heldClaim) {
	var res string
	c.do(false, true, func(ctx context.Context) error {
		return c.w.ledger.Heartbeat(ctx, backend.HeartbeatRequest{Job: c.w.jobs[cl.job].name, ScheduledAt: c.w.instants[cl.occ], Owner: cl.owner, Token: cl.token, TTL: cl.ttl})
	}, func(err error, call, ret int64) porcupine.Operation {
		res = c.result("heartbeat", err)
		in := c.ledgerInput(model.Heartbeat, cl.job, cl.occ)
		in.Owner, in.Token, in.TTL, in.Call, in.Ret = cl.owner.String(), cl.token, int64(cl.ttl), call, ret
		return porcupine.Operation{Input: in, Output: model.LedgerOutput{Result: res}}
	})
	if res == model.Lost {
		c.claim = nil
	}
}

func (c *client) finish(cl *heldClaim) {
	c.do(false, true, func(ctx context.Context) error {
		return c.w.ledger.Finish(ctx, backend.FinishRequest{Job: c.w.jobs[cl.job].name, ScheduledAt: c.w.instants[cl.occ], Owner: cl.owner, Token: cl.token, Outcome: backend.Outcome{State: backend.Succeeded, Duration: time.Millisecond, Result: "randomized"}})
	}, func(err error, call, ret int64) porcupine.Operation {
		in := c.ledgerInput(model.Finish, cl.job, cl.occ)
		in.Owner, in.Token, in.Call, in.Ret = cl.owner.String(), cl.token, call, ret
		return porcupine.Operation{Input: in, Output: model.LedgerOutput{Result: c.result("finish", err)}}
	})
	c.claim = nil
}

func (c *client) abandon(job, occ int) {
	c.do(false, true, func(ctx context.Context) error {
		return c.w.ledger.Abandon(ctx, c.w.jobs[job].name, c.w.instants[occ])
	}, func(err error, call, ret int64) porcupine.Operation {
		in := c.ledgerInput(model.Abandon, job, occ)
		in.Call, in.Ret = call, ret
		return porcupine.Operation{Input: in, Output: model.LedgerOutput{Result: c.result("abandon", err), RecordToken: recordToken(err)}}
	})
}

// prune deletes every finished run (olderThan an hour ahead of every
// clock, a batch larger than the run ever finishes), as the model assumes.
func (c *client) prune() {
	var n int
	c.do(false, true, func(ctx context.Context) (err error) {
		n, err = c.w.ledger.Prune(ctx, time.Now().Add(time.Hour), rndPruneBatch)
		return err
	}, func(err error, call, ret int64) porcupine.Operation {
		return porcupine.Operation{Input: model.LedgerInput{Kind: model.Prune, Call: call, Ret: ret},
			Output: model.LedgerOutput{Result: c.result("prune", err), Pruned: n}}
	})
}
