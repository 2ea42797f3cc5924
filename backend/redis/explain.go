package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/backend"
)

var (
	_ backend.Explainer   = (*Backend)(nil)
	_ backend.ServerClock = (*Backend)(nil)
)

func reason(capability, why string) backend.Reason {
	return backend.Reason{Capability: capability, Why: why}
}

// Explain implements backend.Explainer: it reads every node's
// configuration as RefreshCapabilities does and says what decides
// SafeFencing and DurableFencing, including what a failover to a replica
// can lose and whether WithWaitReplicas guards against it.
func (b *Backend) Explain(ctx context.Context) ([]backend.Reason, error) {
	nodes, sharded, ring, err := b.readNodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("redis: read server configuration: %w", err)
	}
	if ring || len(nodes) == 0 {
		why := "a Ring client (client-side sharding without failover coordination): no fencing guarantee is claimed"
		return []backend.Reason{reason("SafeFencing", why), reason("DurableFencing", why)}, nil
	}
	where := ""
	if sharded {
		where = fmt.Sprintf(" (on one of the Cluster's %d nodes)", len(nodes))
	}
	replicas := 0
	for _, n := range nodes {
		if n.configErr != nil {
			why := fmt.Sprintf("could not read the configuration%s (%v; renamed, or forbidden by ACL?): maxmemory-policy and appendonly cannot be verified, so no fencing guarantee is claimed", where, n.configErr)
			return []backend.Reason{reason("SafeFencing", why), reason("DurableFencing", why)}, nil
		}
		if n.role != "master" {
			replicas++
		} else {
			replicas += n.replicas
		}
	}
	failover := b.failoverReason(nodes, replicas, sharded)
	var rs []backend.Reason
	safe := "maxmemory-policy noeviction: the token counters are never evicted"
	if sharded {
		safe = "maxmemory-policy noeviction on every node: the token counters are never evicted"
	}
	for _, n := range nodes {
		if n.policy != "noeviction" {
			safe = fmt.Sprintf("maxmemory-policy %s%s: under memory pressure Redis may evict a token counter, and that key's tokens start again from 1", n.policy, where)
			break
		}
	}
	if replicas > 0 {
		safe += "; tokens increase while the primary that granted them lives — a failover can lose the last grants (see DurableFencing)"
	}
	rs = append(rs, reason("SafeFencing", safe))
	d := ""
	for _, n := range nodes {
		switch {
		case n.appendonly != "yes":
			d = fmt.Sprintf("appendonly %s%s: a restart of the server forgets the token counters, so tokens go backwards after a restart", n.appendonly, where)
		case n.appendfsync != "always":
			d = fmt.Sprintf("appendonly yes but appendfsync %s%s: a crash loses the last writes, so tokens can go backwards after a crash", n.appendfsync, where)
		case n.infoErr != nil:
			d = fmt.Sprintf("could not read the replication state (%v): whether a replica could take over cannot be verified, so durability is not claimed", n.infoErr)
		}
		if d != "" {
			break
		}
	}
	switch {
	case d != "" && failover != "":
		d += "; also " + failover
	case d == "" && failover != "":
		d = failover
	case d == "":
		for _, n := range nodes {
			if n.policy != "noeviction" {
				d = "appendonly yes and appendfsync always, but the counters may be evicted (see SafeFencing)"
			}
		}
	}
	if d == "" {
		d = "appendonly yes, appendfsync always, one primary without replicas: every grant is on disk before its reply"
	}
	return append(rs, reason("DurableFencing", d)), nil
}

// failoverReason says what replicas mean for the grants, or "" when there
// are none.
func (b *Backend) failoverReason(nodes []nodeConfig, replicas int, sharded bool) string {
	if replicas == 0 {
		return ""
	}
	what := fmt.Sprintf("%d replicas", replicas)
	if !sharded && len(nodes) == 1 {
		what = fmt.Sprintf("role %s with %d replicas", nodes[0].role, nodes[0].replicas)
	}
	why := what + ": replication is asynchronous, so a failover (Sentinel, Cluster) to a replica that missed the last grants hands a key out again with a repeated or lower token"
	if n, timeout := b.wait.replicas, b.wait.timeout; n > 0 {
		return why + fmt.Sprintf("; each grant waits for %d replicas (wait_replicas=%d, WAIT %v) before it is reported, so a failover to one of those keeps every reported grant — a failover to another replica, or a crash of every copy without appendfsync always, can still lose one", n, n, timeout)
	}
	return why + "; wait_replicas=N (WithWaitReplicas) makes each grant wait for N replicas before it is reported, and min-replicas-to-write N on the primary makes it refuse writes it cannot replicate"
}

// ServerTime implements backend.ServerClock with TIME.
func (b *Backend) ServerTime(ctx context.Context) (time.Time, error) {
	return b.c.Time(ctx).Result()
}
