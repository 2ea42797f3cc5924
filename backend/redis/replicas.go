package redis

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// DefaultWaitTimeout is the WAIT timeout of the wait_replicas URL
// parameter when wait_timeout is not given.
const DefaultWaitTimeout = 200 * time.Millisecond

type waitConfig struct {
	replicas int
	timeout  time.Duration
}

// WithWaitReplicas makes every grant (every script call) wait until n
// replicas have its writes, at most timeout, before it is reported: the
// batch's pipeline ends with WAIT n timeout on the same connection. Redis
// replicates asynchronously, so without it a primary that fails right
// after a grant can be replaced (Sentinel, Cluster failover) by a replica
// that never saw the grant: the lease is granted again and its token
// handed out twice. With n equal to the number of replicas, a failover
// keeps every grant that was reported; a call not confirmed in time
// fails with ErrNotReplicated (outcome unknown). Pair it with the
// servers' min-replicas-to-write (see docs/config.md). n = 0 turns it off;
// n < 0 or a timeout under 1 ms with n > 0 is backend.ErrInvalid from
// New.
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return func(c *config) error {
		switch {
		case n < 0:
			return fmt.Errorf("%w: WithWaitReplicas(%d, %v): negative replica count", backend.ErrInvalid, n, timeout)
		case n > 0 && timeout < time.Millisecond:
			return fmt.Errorf("%w: WithWaitReplicas(%d, %v): WAIT needs a timeout of at least 1ms", backend.ErrInvalid, n, timeout)
		}
		c.wait = waitConfig{replicas: n, timeout: timeout}
		return nil
	}
}

// WaitReplicas returns the WithWaitReplicas setting (0 when off).
func (b *Backend) WaitReplicas() (n int, timeout time.Duration) {
	return b.wait.replicas, b.wait.timeout
}
