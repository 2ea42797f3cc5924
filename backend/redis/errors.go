package redis

import "github.com/leasehold/leasehold/internal/redispipe"

// ErrNotReplicated: with WithWaitReplicas, the call ran on the primary but
// WAIT did not confirm it on enough replicas in time. Its outcome is
// unknown (a failover now could promote a replica without it), so the
// Locker reports such an acquire as indeterminate and withdraws it; it
// never matches backend.ErrNotApplied. The other errors of this package are
// backend's.
var ErrNotReplicated = redispipe.ErrNotReplicated
