package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestReclaimReadsRunAndLeaseTogether: a read of an occurrence reads the
// run node, then its runner's lease node. A Finish between the two reads
// (it sets the run finished and deletes the lease node in one multi-op)
// must not make the pair look like "running, lease expired": Reclaim
// would then answer for a state that never was — ErrOverlap while another
// occurrence runs, where the finished run answers *ClaimedError. Found by
// the randomized conformance check (seed 17108302146028869572).
func TestReclaimReadsRunAndLeaseTogether(t *testing.T) {
	srv := testserver.ZooKeeper(t)
	prefix := fmt.Sprintf("/torn%d", time.Now().UnixNano())
	g := newGate()
	armed := make(chan struct{})
	hooked := openHooked(t, srv.Addr(), prefix, 10*time.Second, hooks{runRead: func(path string) {
		select {
		case <-armed:
			g.pass(path)
		default:
		}
	}})
	plain := openHooked(t, srv.Addr(), prefix, 10*time.Second, hooks{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	at := time.Now().Truncate(time.Second)
	other := at.Add(-time.Minute)
	runner, rival, thief := owner("runner"), owner("rival"), owner("thief")
	claim := func(when time.Time, o backend.Owner) backend.Grant {
		t.Helper()
		gr, err := plain.Claim(ctx, backend.ClaimRequest{Job: "j", ScheduledAt: when, Owner: o, TTL: 10 * time.Second, MaxEarly: time.Minute})
		if err != nil {
			t.Fatalf("claim %v: %v", when, err)
		}
		return gr
	}
	gr := claim(at, runner)
	claim(other, rival) // a second running occurrence: the job is at MaxRunning 1

	type answer struct {
		run backend.Run
		err error
	}
	done := make(chan answer, 1)
	close(armed)
	go func() {
		_, r, err := hooked.Reclaim(ctx, backend.ClaimRequest{Job: "j", ScheduledAt: at, Owner: thief, TTL: 10 * time.Second, MaxRunning: 1})
		done <- answer{r, err}
	}()
	g.wait(t, 30*time.Second, "Reclaim's read of the run node")
	if err := plain.Finish(ctx, backend.FinishRequest{Job: "j", ScheduledAt: at, Owner: runner, Token: gr.Token,
		Outcome: backend.Outcome{State: backend.Succeeded}}); err != nil {
		t.Fatalf("Finish between the reads: %v", err)
	}
	g.open()
	a := <-done
	var claimed *backend.ClaimedError
	if !errors.As(a.err, &claimed) || claimed.Run.State != backend.Succeeded {
		t.Fatalf("Reclaim of an occurrence finished while it read: %v, want a *ClaimedError with the finished run (never ErrOverlap or ErrNotExpired: no moment had the run running with its lease gone)", a.err)
	}
}

func owner(instance string) backend.Owner {
	return backend.Owner{Instance: instance, Nonce: backend.NewNonce()}
}
