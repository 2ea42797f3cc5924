package nsrecipe

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// Tenant is what a tenant's backend offers: leases and a run ledger.
type Tenant interface {
	backend.Leases
	backend.Ledger
}

// CheckConfined is the cross-tenant check every namespace test runs after
// applying its backend's recipe: victim (opened as tenant B in B's
// location) holds lock key and runs an occurrence of job; intruder (opened
// with tenant A's credentials over B's location) must be refused reading,
// listing, renewing, releasing and taking B's lease, and claiming,
// reading, heartbeating, finishing, reclaiming and abandoning B's runs,
// and creating, reading, deleting and pruning B's records —
// even when it knows B's owner and tokens. refused reports whether an
// error is the server's refusal (not some other failure). B's lease and
// run must be unchanged afterwards.
func CheckConfined(t testing.TB, victim, intruder Tenant, key, job string, refused func(error) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	owner := backend.Owner{Instance: "b", Nonce: backend.NewNonce()}
	lease, err := victim.Acquire(ctx, key, owner, time.Minute)
	if err != nil {
		t.Fatalf("B acquires %q in its own location: %v", key, err)
	}
	at := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	run, err := victim.Claim(ctx, backend.ClaimRequest{Job: job, ScheduledAt: at, Owner: owner, TTL: time.Minute})
	if err != nil {
		t.Fatalf("B claims %q in its own location: %v", job, err)
	}
	thief := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	check := func(what string, err error) {
		t.Helper()
		if !refused(err) {
			t.Errorf("A %s in B's location: %v, want the server's refusal", what, err)
		}
	}
	_, err = intruder.Get(ctx, key)
	check("reads B's lease (Get)", err)
	_, err = intruder.List(ctx, "", 0)
	check("lists B's leases (List)", err)
	_, err = intruder.Acquire(ctx, key, thief, time.Minute)
	check("takes B's lock (Acquire)", err)
	_, err = intruder.Renew(ctx, backend.RenewRequest{Key: key, Owner: owner, Token: lease.Token, TTL: time.Minute})
	check("renews B's lease (Renew)", err)
	check("releases B's lease (Release)", intruder.Release(ctx, key, owner, lease.Token))
	_, err = intruder.Claim(ctx, backend.ClaimRequest{Job: job, ScheduledAt: at.Add(time.Second), Owner: thief, TTL: time.Minute})
	check("claims B's job (Claim)", err)
	_, err = intruder.GetRun(ctx, job, at)
	check("reads B's run (GetRun)", err)
	_, err = intruder.ListRuns(ctx, backend.RunFilter{})
	check("lists B's runs (ListRuns)", err)
	_, _, err = intruder.HighWater(ctx, job)
	check("reads B's high-water mark (HighWater)", err)
	check("heartbeats B's run (Heartbeat)", intruder.Heartbeat(ctx, backend.HeartbeatRequest{Job: job, ScheduledAt: at, Owner: owner, Token: run.Token, TTL: time.Minute}))
	check("finishes B's run (Finish)", intruder.Finish(ctx, backend.FinishRequest{Job: job, ScheduledAt: at, Owner: owner, Token: run.Token, Outcome: backend.Outcome{State: backend.Succeeded}}))
	_, _, err = intruder.Reclaim(ctx, backend.ClaimRequest{Job: job, ScheduledAt: at, Owner: thief, TTL: time.Minute})
	check("reclaims B's run (Reclaim)", err)
	_, err = intruder.Abandon(ctx, job, at)
	check("abandons B's run (Abandon)", err)
	rec, _, err := victim.CreateRecord(ctx, backend.CreateRecordRequest{Name: job + "!pause", Seq: 1, Value: "paused", Owner: owner})
	if err != nil {
		t.Fatalf("B creates a record in its own location: %v", err)
	}
	_, _, err = intruder.CreateRecord(ctx, backend.CreateRecordRequest{Name: rec.Name, Seq: 2, Value: "resumed", Owner: thief})
	check("creates a record among B's (CreateRecord)", err)
	_, err = intruder.ListRecords(ctx, backend.ListRecordsRequest{Name: rec.Name})
	check("reads B's records (ListRecords)", err)
	check("deletes B's record (DeleteRecord)", intruder.DeleteRecord(ctx, backend.DeleteRecordRequest{Name: rec.Name, Seq: rec.Seq, Owner: owner}))
	_, err = intruder.PruneRecords(ctx, time.Now().Add(time.Hour), 10)
	check("prunes B's records (PruneRecords)", err)
	if rs, err := victim.ListRecords(ctx, backend.ListRecordsRequest{Name: rec.Name}); err != nil || len(rs) != 1 || rs[0] != rec {
		t.Errorf("B's records after A's attempts: %+v, %v; want only %+v", rs, err, rec)
	}

	if l, err := victim.Get(ctx, key); err != nil || l.Token != lease.Token || l.Owner != owner {
		t.Errorf("B's lease after A's attempts: %+v, %v; want token %d owner %v", l, err, lease.Token, owner)
	}
	if r, err := victim.GetRun(ctx, job, at); err != nil || r.State != backend.Running || r.Token != run.Token {
		t.Errorf("B's run after A's attempts: %+v, %v; want running with token %d", r, err, run.Token)
	}
	if err := victim.Finish(ctx, backend.FinishRequest{Job: job, ScheduledAt: at, Owner: owner, Token: run.Token, Outcome: backend.Outcome{State: backend.Succeeded}}); err != nil {
		t.Errorf("B finishes its run: %v", err)
	}
	if err := victim.Release(ctx, key, owner, lease.Token); err != nil {
		t.Errorf("B releases its lease: %v", err)
	}
}
