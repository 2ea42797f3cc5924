package model

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const ms = int64(time.Millisecond)

func lop(client int, kind, owner string, token uint64, call, ret int64, result string, outTok uint64) porcupine.Operation {
	return porcupine.Operation{ClientId: client,
		Input: LeaseInput{Kind: kind, Key: "k", Owner: owner, Token: token, TTL: 1000 * ms, Call: call * ms, Ret: ret * ms},
		Call:  call * ms, Return: ret * ms,
		Output: LeaseOutput{Result: result, Token: outTok, TTL: 1000 * ms, HeldToken: outTok}}
}

func getOp(client int, call, ret int64, result, holder string, tok uint64) porcupine.Operation {
	return porcupine.Operation{ClientId: client,
		Input: LeaseInput{Kind: Get, Key: "k", Call: call * ms, Ret: ret * ms}, Call: call * ms, Return: ret * ms,
		Output: LeaseOutput{Result: result, Token: tok, Holder: holder}}
}

type modelCase struct {
	name string
	ops  []porcupine.Operation
	want bool
}

func run(t *testing.T, m porcupine.Model, cases []modelCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(m, c.ops); got != c.want {
				t.Fatalf("linearizable = %v, want %v", got, c.want)
			}
		})
	}
}

func TestLeases(t *testing.T) {
	run(t, Leases(Options{}), []modelCase{
		{"hand-over after release", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, OK, 1),
			lop(0, Release, "a", 1, 100, 110, OK, 0),
			lop(1, Acquire, "b", 0, 120, 130, OK, 2),
		}, true},
		// A plain mutex model fails this one: a's lease expired unreleased.
		{"hand-over after expiry", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, OK, 1),
			lop(1, Acquire, "b", 0, 1100, 1110, OK, 2),
			lop(0, Renew, "a", 1, 1200, 1210, Lost, 0),
		}, true},
		{"grant while the lease is provably live", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, OK, 1),
			lop(1, Acquire, "b", 0, 500, 510, OK, 2),
		}, false},
		{"renewal extends the lease", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, OK, 1),
			lop(0, Renew, "a", 1, 600, 610, OK, 0),
			lop(1, Acquire, "b", 0, 1200, 1210, OK, 2),
		}, false},
		{"token does not increase", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, OK, 5),
			lop(0, Release, "a", 5, 100, 110, OK, 0),
			lop(1, Acquire, "b", 0, 120, 130, OK, 5),
		}, false},
		{"renewal by a stale holder succeeds", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, OK, 1),
			lop(1, Acquire, "b", 0, 1100, 1110, OK, 2),
			lop(0, Renew, "a", 1, 1200, 1210, OK, 0),
		}, false},
		{"held answer names the holder", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, OK, 1),
			lop(1, Acquire, "b", 0, 20, 30, Held, 1),
		}, true},
		{"held answer names a non-holder", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, OK, 1),
			lop(1, Acquire, "b", 0, 20, 30, Held, 2),
		}, false},
		{"held while free", []porcupine.Operation{
			lop(1, Acquire, "b", 0, 20, 30, Held, 1),
		}, false},
		{"an indeterminate acquire may have been applied", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, Indeterminate, 0),
			lop(1, Acquire, "b", 0, 20, 30, Held, 0),
		}, true},
		{"an indeterminate acquire may not have been applied", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, Indeterminate, 0),
			lop(1, Acquire, "b", 0, 20, 30, OK, 1),
		}, true},
		{"a late first attempt answers the retry's grant", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 300, Indeterminate, 0), // held, delivered after the retry
			lop(0, Acquire, "a", 0, 20, 30, OK, 1),
			lop(1, Acquire, "b", 0, 1200, 1210, Held, 1), // the late attempt renewed it
		}, true},
		{"lost while provably live", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, OK, 1),
			lop(0, Renew, "a", 1, 300, 310, Lost, 0),
		}, false},
		{"get names the holder", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, OK, 1),
			getOp(1, 20, 30, OK, "a", 1),
		}, true},
		{"get names a non-holder", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, OK, 1),
			getOp(1, 20, 30, OK, "b", 1),
		}, false},
		{"not found while provably live", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, OK, 1),
			getOp(1, 20, 30, NotFound, "", 0),
		}, false},
		{"not found after expiry, then the renewal must fail", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, OK, 1),
			getOp(1, 1100, 1110, NotFound, "", 0),
			lop(0, Renew, "a", 1, 1200, 1210, OK, 0),
		}, false},
	})
	// A backend that declares SafeFencing=false is not held to increasing
	// tokens, and still to exclusion.
	run(t, Leases(Options{UnorderedTokens: true}), []modelCase{
		{"unordered: token does not increase", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, OK, 5),
			lop(0, Release, "a", 5, 100, 110, OK, 0),
			lop(1, Acquire, "b", 0, 120, 130, OK, 5),
		}, true},
		{"unordered: the token a held answer names is not judged", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, OK, 3),
			lop(1, Acquire, "b", 0, 5, 8, Held, 2),
			getOp(1, 20, 30, OK, "a", 2),
		}, true},
		{"unordered: the holder a get answer names is", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, OK, 3),
			getOp(1, 20, 30, OK, "b", 3),
		}, false},
		{"unordered: grant while provably live", []porcupine.Operation{
			lop(0, Acquire, "a", 0, 0, 10, OK, 1),
			lop(1, Acquire, "b", 0, 500, 510, OK, 2),
		}, false},
	})
}

func cop(client int, kind string, occ int, owner string, token uint64, call, ret int64, result string, outTok uint64) porcupine.Operation {
	return porcupine.Operation{ClientId: client,
		Input: LedgerInput{Kind: kind, Job: "j", Occurrence: occ, Owner: owner, Token: token, TTL: 1000 * ms, MaxRunning: 1,
			Call: call * ms, Ret: ret * ms},
		Call: call * ms, Return: ret * ms,
		Output: LedgerOutput{Result: result, Token: outTok, TTL: 1000 * ms}}
}

func pruneOp(call, ret int64, result string, n int) porcupine.Operation {
	return porcupine.Operation{Input: LedgerInput{Kind: Prune, Call: call * ms, Ret: ret * ms}, Call: call * ms, Return: ret * ms,
		Output: LedgerOutput{Result: result, Pruned: n}}
}

func TestLedger(t *testing.T) {
	run(t, Ledger(Options{}), []modelCase{
		{"first claim wins, the other is claimed", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 1),
			cop(1, Claim, 0, "b", 0, 20, 30, Claimed, 0),
			cop(0, Finish, 0, "a", 1, 40, 50, OK, 0),
		}, true},
		{"an occurrence won twice", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 1),
			cop(1, Claim, 0, "b", 0, 20, 30, OK, 2),
		}, false},
		{"won twice, the first outcome unknown and confirmed by its retry", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, Indeterminate, 0),
			cop(1, Claim, 0, "b", 0, 20, 30, OK, 1),
			cop(0, Claim, 0, "a", 0, 40, 50, OK, 1),
		}, false},
		{"a finished occurrence is claimed again", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 1),
			cop(0, Finish, 0, "a", 1, 20, 30, OK, 0),
			cop(1, Claim, 0, "b", 0, 40, 50, OK, 2),
		}, false},
		{"claimed again after prune", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 1),
			cop(0, Finish, 0, "a", 1, 20, 30, OK, 0),
			pruneOp(35, 38, OK, 1),
			cop(1, Claim, 0, "b", 0, 40, 50, OK, 2),
		}, true},
		{"token regresses across prune", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 3),
			cop(0, Finish, 0, "a", 3, 20, 30, OK, 0),
			pruneOp(35, 38, OK, 1),
			cop(1, Claim, 1, "b", 0, 40, 50, OK, 2),
		}, false},
		{"prune deletes runs one by one", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 1),
			cop(0, Finish, 0, "a", 1, 20, 30, OK, 0),
			cop(0, Claim, 1, "a", 0, 40, 50, OK, 2),
			cop(0, Finish, 1, "a", 2, 60, 70, OK, 0),
			pruneOp(100, 200, OK, 2),
			cop(1, Claim, 0, "b", 0, 110, 120, OK, 3),
			cop(1, Claim, 1, "c", 0, 130, 140, Claimed, 0),
		}, true},
		{"prune found nothing while a run was finished", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 1),
			cop(0, Finish, 0, "a", 1, 20, 30, OK, 0),
			pruneOp(100, 200, OK, 0),
		}, false},
		{"prune skips a run a concurrent reclaim touches", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 1),
			cop(0, Finish, 0, "a", 1, 20, 30, OK, 0),
			cop(0, Claim, 1, "a", 0, 40, 50, OK, 2),
			cop(0, Finish, 1, "a", 2, 60, 70, OK, 0),
			cop(2, Reclaim, 0, "r", 0, 100, 150, Claimed, 0),
			pruneOp(100, 200, OK, 1),
			cop(1, Claim, 0, "b", 0, 210, 220, Claimed, 0),
			cop(1, Claim, 1, "c", 0, 230, 240, OK, 3),
		}, true},
		{"prune skips a run nothing else touched", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 1),
			cop(0, Finish, 0, "a", 1, 20, 30, OK, 0),
			cop(0, Claim, 1, "a", 0, 40, 50, OK, 2),
			cop(0, Finish, 1, "a", 2, 60, 70, OK, 0),
			cop(2, Reclaim, 0, "r", 0, 100, 150, Claimed, 0),
			pruneOp(100, 200, OK, 1),
			cop(1, Claim, 0, "b", 0, 210, 220, OK, 3),
			cop(1, Claim, 1, "c", 0, 230, 240, Claimed, 0),
		}, false},
		{"max running refuses while provably live", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 1),
			cop(1, Claim, 1, "b", 0, 20, 30, Overlap, 0),
		}, true},
		{"max running exceeded", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 1),
			cop(1, Claim, 1, "b", 0, 20, 30, OK, 2),
		}, false},
		{"max running: overlap with nothing running", []porcupine.Operation{
			cop(1, Claim, 1, "b", 0, 20, 30, Overlap, 0),
		}, false},
		{"reclaim while provably live", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 1),
			cop(1, Reclaim, 0, "b", 0, 500, 510, OK, 2),
		}, false},
		{"reclaim after expiry, the old runner is lost", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 1),
			cop(1, Reclaim, 0, "b", 0, 1100, 1110, OK, 2),
			cop(0, Heartbeat, 0, "a", 1, 1200, 1210, Lost, 0),
			cop(1, Finish, 0, "b", 2, 1300, 1310, OK, 0),
		}, true},
		{"a stale runner finishes", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 1),
			cop(1, Reclaim, 0, "b", 0, 1100, 1110, OK, 2),
			cop(0, Finish, 0, "a", 1, 1200, 1210, OK, 0),
		}, false},
		{"abandon while provably live", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 1),
			cop(1, Abandon, 0, "", 0, 20, 30, OK, 0),
		}, false},
		{"abandon after expiry ends it", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 1),
			cop(1, Abandon, 0, "", 0, 1100, 1110, OK, 0),
			cop(1, Reclaim, 0, "b", 0, 1200, 1210, Claimed, 0),
		}, true},
		{"a retry answered lost once the lease could have expired", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 1),
			cop(0, Claim, 0, "a", 0, 1100, 1110, Lost, 0),
		}, true},
		{"a retry answered lost while provably live", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 1),
			cop(0, Claim, 0, "a", 0, 20, 30, Lost, 0),
		}, false},
		{"heartbeat lost while provably live", []porcupine.Operation{
			cop(0, Claim, 0, "a", 0, 0, 10, OK, 1),
			cop(0, Heartbeat, 0, "a", 1, 20, 30, Lost, 0),
		}, false},
	})
}
