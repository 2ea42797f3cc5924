package zookeeper

import "github.com/leasehold/leasehold/backend"

// hooks are test seams: each one set is called at one point of a grant or
// of a background path, so that a test can put the steps of a race in the
// order the race needs, against a real server. Only the package's own
// tests set them (Config's unexported field); no other backend has any.
type hooks struct {
	// settleList is called before each listing of a settle pass for
	// owner's nodes in key's queue.
	settleList func(key string, owner backend.Owner)
	// withdrawList is called when an attempt to withdraw owner from key's
	// queue (in the background too) that does not know its node is about
	// to list owner's nodes by name; the func it returns, if any, is called
	// with the attempt's result.
	withdrawList func(key string, owner backend.Owner) (done func(left bool))
	// beforeGrant is called when an Acquire or AcquireQueued has listed its
	// node at path lowest, before it arms the node's timer and grants it.
	beforeGrant func(path string)
	// runRead is called when a read of an occurrence has read the run
	// node at path and is about to read its runner's lease node.
	runRead func(path string)
	// claimCount is called by Claim with "before" just before it counts
	// the job's running occurrences for MaxRunning, and with "after" once
	// that count reached MaxRunning, before the overlap is confirmed.
	claimCount func(stage string)
	// pruneEntry is called by Prune for a finished-run index entry it
	// listed, before it deletes the entry's run.
	pruneEntry func(name string)
	// aliveListed is called by ListRuns when it has listed a job's live
	// lease nodes, before it reads the job's runs.
	aliveListed func(job string)
}

func (h hooks) onSettleList(key string, owner backend.Owner) {
	if h.settleList != nil {
		h.settleList(key, owner)
	}
}

func (h hooks) onBeforeGrant(path string) {
	if h.beforeGrant != nil {
		h.beforeGrant(path)
	}
}

func (h hooks) onWithdrawList(key string, owner backend.Owner) func(left bool) {
	if h.withdrawList != nil {
		if done := h.withdrawList(key, owner); done != nil {
			return done
		}
	}
	return func(bool) {}
}

func (h hooks) onRunRead(path string) {
	if h.runRead != nil {
		h.runRead(path)
	}
}

func (h hooks) onClaimCount(stage string) {
	if h.claimCount != nil {
		h.claimCount(stage)
	}
}

func (h hooks) onPruneEntry(name string) {
	if h.pruneEntry != nil {
		h.pruneEntry(name)
	}
}

func (h hooks) onAliveListed(job string) {
	if h.aliveListed != nil {
		h.aliveListed(job)
	}
}
