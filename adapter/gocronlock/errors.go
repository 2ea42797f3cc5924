package gocronlock

import "errors"

// ErrNotLeader is returned by IsLeader on a follower. The other errors of
// this package are leasehold's.
var ErrNotLeader = errors.New("leasehold/gocronlock: not the leader")
