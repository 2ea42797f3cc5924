package redispipe

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
)

// ErrNotReplicated: the call ran on the primary, but WAIT did not confirm
// it on Options.WaitReplicas replicas within Options.WaitTimeout. Its
// outcome is unknown: a failover now could promote a replica without it.
// It never wraps backend.ErrNotApplied.
var ErrNotReplicated = errors.New("redispipe: not confirmed by enough replicas")

// Options configure NewWith.
type Options struct {
	// WaitReplicas, when above 0, ends every pipeline with WAIT
	// WaitReplicas WaitTimeout on the same connection: a call is reported
	// as done only once that many replicas have its writes. Redis
	// replicates asynchronously; without WAIT a failover can promote a
	// replica that never saw a grant the primary acknowledged.
	WaitReplicas int
	// WaitTimeout bounds each WAIT (required with WaitReplicas; keep it
	// below the client's read timeout).
	WaitTimeout time.Duration
	// MapError, if set, may replace the error of a Cluster node's reply
	// (it returns the replacement, or nil to keep it): hooks added to a
	// ClusterClient run on its own commands, not on the node clients the
	// lanes send on.
	MapError func(error) error
}

func (o Options) validate() error {
	switch {
	case o.WaitReplicas < 0:
		return fmt.Errorf("%w: WaitReplicas %d is negative", backend.ErrInvalid, o.WaitReplicas)
	case o.WaitReplicas > 0 && o.WaitTimeout < time.Millisecond:
		return fmt.Errorf("%w: WaitTimeout %v: WAIT for %d replicas needs a timeout of at least 1ms", backend.ErrInvalid, o.WaitTimeout, o.WaitReplicas)
	case o.WaitReplicas == 0 && o.WaitTimeout != 0:
		return fmt.Errorf("%w: WaitTimeout %v without WaitReplicas", backend.ErrInvalid, o.WaitTimeout)
	}
	return nil
}

// waitReplicas executes pipe, ending it with WAIT when WaitReplicas asks
// for it; the calls in cmds that succeeded but were not confirmed by
// enough replicas get an ErrNotReplicated error (outcome unknown).
func (p *Pipe) waitReplicas(ctx context.Context, pipe goredis.Pipeliner, cmds []*goredis.Cmd) {
	if p.opts.WaitReplicas == 0 {
		_, _ = pipe.Exec(ctx)
		return
	}
	w := goredis.NewIntCmd(ctx, "wait", p.opts.WaitReplicas, p.opts.WaitTimeout.Milliseconds())
	_ = pipe.Process(ctx, w)
	_, _ = pipe.Exec(ctx)
	n, err := w.Result()
	if err == nil && n >= int64(p.opts.WaitReplicas) {
		return
	}
	if p.opts.MapError != nil && err != nil { // a Cluster node's WAIT: the Cluster client's hooks did not see it
		if m := p.opts.MapError(err); m != nil {
			err = m
		}
	}
	why := fmt.Errorf("WAIT %d %d answered %d", p.opts.WaitReplicas, p.opts.WaitTimeout.Milliseconds(), n)
	switch {
	case errors.Is(err, backend.ErrRefused):
		// Quoted, not wrapped: a hook marks a NOPERM refusal "not
		// applied", true of WAIT but not of the calls, which ran.
		why = fmt.Errorf("WAIT %d %d: %v: %w", p.opts.WaitReplicas, p.opts.WaitTimeout.Milliseconds(), err, backend.ErrRefused)
	case err != nil:
		why = fmt.Errorf("WAIT %d %d: %w", p.opts.WaitReplicas, p.opts.WaitTimeout.Milliseconds(), err)
	}
	for _, c := range cmds {
		if c.Err() == nil {
			c.SetErr(fmt.Errorf("%w (%w): ran on the primary, outcome unknown", ErrNotReplicated, why))
		}
	}
}
