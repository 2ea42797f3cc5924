package schedule_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
	"github.com/leasehold/leasehold/schedule"
)

// oldBinaryVersion is how leasehold before wt15-a hashed a spec: the raw
// text and the zone name.
func oldBinaryVersion(raw, zone string) string {
	sum := sha256.Sum256([]byte(raw + "\x00" + zone))
	return hex.EncodeToString(sum[:8])
}

// recordLikeOldBinary does what ensureVersion of leasehold before wt15-a did
// when its version was not the newest: record it from its next instant past
// the settle time (and never refuse).
func recordLikeOldBinary(t *testing.T, l backend.Ledger, job, version string, from time.Time) {
	t.Helper()
	owner := backend.Owner{Instance: "old-binary", Nonce: backend.NewNonce()}
	req := backend.ClaimRequest{Job: job + "!version", ScheduledAt: from, SpecVersion: version,
		Owner: owner, TTL: time.Minute, MaxEarly: 100 * 365 * 24 * time.Hour}
	g, err := l.Claim(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Finish(context.Background(), backend.FinishRequest{Job: req.Job, ScheduledAt: from, Owner: owner, Token: g.Token, Outcome: backend.Outcome{State: backend.Succeeded}}); err != nil {
		t.Fatal(err)
	}
}

// TestRollingUpgradeWithOldBinaryKeepsNewVersion (found by review; the bug it shows): the upgrade to the
// canonical hash changes every job's version although no config changed.
// During a rolling upgrade an old-binary instance that restarts (it has no
// forward-only rule) records the old hash again after a new-binary
// instance recorded the new one. From then on every new-binary instance
// that starts - with the very same config - is REFUSED, so once the
// rollout is complete no instance claims the job at all.
//
// It runs in a synctest bubble: the old binary's record 2 s ahead and the
// settle before it applies are virtual time.
func TestRollingUpgradeWithOldBinaryKeepsNewVersion(t *testing.T) {
	synctest.Test(t, rollingUpgradeWithOldBinaryKeepsNewVersion)
}

// rollingUpgradeWithOldBinaryKeepsNewVersion is TestRollingUpgradeWithOldBinaryKeepsNewVersion
// inside its bubble.
func rollingUpgradeWithOldBinaryKeepsNewVersion(t *testing.T) {
	const spec = "@every 100ms"
	b := memory.New()
	l := schedule.NamespaceLedger(b, "default")
	oldV := oldBinaryVersion(spec, "UTC")
	// The fleet ran the old binary: its version applies from the epoch.
	recordLikeOldBinary(t, l, "job", oldV, time.UnixMilli(1).UTC())

	fx := newEffects()
	mk := func(instance string) *schedule.Scheduler {
		s := newScheduler(t, b, instance)
		if err := s.Register(schedule.Job{Name: "job", Schedule: spec,
			Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	// Host 1 is upgraded first.
	n1 := mk("host1-new")
	start(t, n1)
	eventually.True(t, 10*time.Second, "the new binary's version recorded", func() bool {
		js := n1.JobStatuses(0)
		return len(js) == 1 && js[0].CurrentVersion == js[0].Version
	})
	// Host 2, still on the old binary, restarts (crash, node drain) before
	// its upgrade and records its hash again, as the old code did.
	sp, _ := schedule.Parse(spec, "")
	recordLikeOldBinary(t, l, "job", oldV, sp.Next(time.Now().Add(2*time.Second)))
	// Host 2 is then upgraded: same config, new binary.
	n2 := mk("host2-new")
	start(t, n2)
	eventually.True(t, 10*time.Second, "host 2 refused or recorded its version", func() bool {
		js := n2.JobStatuses(0)
		return len(js) == 1 && (js[0].VersionRefused || js[0].CurrentVersion == js[0].Version)
	})
	js := n2.JobStatuses(0)
	if len(js) == 1 && js[0].VersionRefused {
		t.Fatalf("a new-binary instance with an unchanged config is REFUSED (version %s, current %s = the old binary's hash): "+
			"once every host runs the new binary no instance will claim the job; versions recorded %v",
			js[0].Version, js[0].CurrentVersion, versionRecords(t, l, "job"))
	}
}

// barrierLedger makes the first two reads of a job's version history,
// once armed, wait for each other, as two instances deploying at the same
// moment do. timedOut reports whether a read gave up waiting: the deploys
// did not meet.
func barrierLedger(b backend.Backend) (fb *faultbackend.Backend, arm func(), timedOut func() bool) {
	var (
		mu      sync.Mutex
		armed   bool
		n       int
		release = make(chan struct{})
		gaveUp  bool
	)
	fb = &faultbackend.Backend{Next: b,
		OnListRecords: func(ctx context.Context, next faultbackend.ListRecordsFunc, f backend.ListRecordsRequest) ([]backend.Record, error) {
			recs, err := next(ctx, f)
			if strings.HasSuffix(f.Name, "!version") {
				mu.Lock()
				wait := armed && n < 2
				if wait {
					n++
					if n == 2 {
						close(release)
					}
				}
				mu.Unlock()
				if wait {
					select {
					case <-release:
					case <-time.After(5 * time.Second):
						mu.Lock()
						gaveUp = true
						mu.Unlock()
					}
				}
			}
			return recs, err
		}}
	arm = func() { mu.Lock(); armed = true; mu.Unlock() }
	timedOut = func() bool { mu.Lock(); defer mu.Unlock(); return gaveUp }
	return fb, arm, timedOut
}

// TestConcurrentDeploysThenPruneLoserStaysRefused (found by review; the bug it shows): two instances
// deploy different new specs at once (A->B on one, A->C on the other).
// Both read the history [A], both record their version, both mark only A
// superseded. C's switch comes later, so C is current and B superseded -
// but only the history says so: no "job!superseded!B" mark exists. Once
// prune removes the history, an instance restarted with B records B again
// and takes the job back from C, which the forward-only rule forbids.
//
// It runs in a synctest bubble: the waits for the switch instants to pass
// and for the restarted loser to judge its version are on virtual time.
func TestConcurrentDeploysThenPruneLoserStaysRefused(t *testing.T) {
	synctest.Test(t, concurrentDeploysThenPruneLoserStaysRefused)
}

// concurrentDeploysThenPruneLoserStaysRefused is
// TestConcurrentDeploysThenPruneLoserStaysRefused inside its bubble.
func concurrentDeploysThenPruneLoserStaysRefused(t *testing.T) {
	mem := memory.New()
	bl, arm, timedOut := barrierLedger(mem)
	l := schedule.NamespaceLedger(mem, "default")
	fx := newEffects()
	mk := func(instance, spec string) *schedule.Scheduler {
		s := newScheduler(t, bl, instance)
		if err := s.Register(schedule.Job{Name: "job", Schedule: spec,
			Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := mk("a", "@every 100ms")
	start(t, a)
	eventually.True(t, 10*time.Second, "A recorded", func() bool { return len(versionRecords(t, l, "job")) == 1 })
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	bSpec, _ := schedule.Parse("@every 130ms", "")
	cSpec, _ := schedule.Parse("@every 170ms", "")
	arm()
	x := mk("x", "@every 130ms")
	y := mk("y", "@every 170ms")
	start(t, x)
	start(t, y)
	eventually.True(t, 10*time.Second, "both new versions recorded", func() bool { return len(versionRecords(t, l, "job")) == 3 })
	if timedOut() { // in virtual time the fallback is instant: say so, or the race is not reproduced
		t.Fatal("the two deploys did not meet at the barrier: the test ran them one after the other")
	}
	got := versionRecords(t, l, "job")
	loser, loserSpec := bSpec, "@every 130ms"
	if got[2] == bSpec.Version() {
		loser, loserSpec = cSpec, "@every 170ms"
	}
	winner := got[2]
	if err := x.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := y.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "past both switches", func() bool {
		recs, err := schedule.ReadVersions(context.Background(), l, "job")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if !r.From.Before(time.Now()) {
				return false
			}
		}
		return len(recs) > 0
	})
	if _, err := mem.Prune(context.Background(), time.Now().Add(time.Hour), 10000); err != nil {
		t.Fatal(err)
	}
	st, err := schedule.ReadVersionState(context.Background(), l, "job", loser)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Superseded {
		t.Errorf("after prune, version %s (replaced by %s) is no longer superseded: ReadVersionState %+v", loser.Version(), winner, st)
	}
	again := mk("loser-again", loserSpec)
	start(t, again)
	// The restarted loser judges its version once: it refuses it, or it
	// records it and takes the job back (the bug). Either shows in its
	// status; what the ledger then holds says which.
	eventually.True(t, 10*time.Second, "the restarted loser refused or recorded its version", func() bool {
		js := again.JobStatuses(0)
		return len(js) == 1 && (js[0].VersionRefused || js[0].CurrentVersion == js[0].Version)
	})
	if got := versionRecords(t, l, "job"); len(got) > 0 && got[len(got)-1] != winner {
		t.Fatalf("the replaced version %s took the job back from %s after prune: recorded %v", loser.Version(), winner, got)
	}
}

// versionRecords returns the distinct versions recorded for job, oldest
// first.
func versionRecords(t *testing.T, l backend.Ledger, job string) []string {
	t.Helper()
	recs, err := schedule.ReadVersions(context.Background(), l, job)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := len(recs) - 1; i >= 0; i-- {
		if len(out) == 0 || out[len(out)-1] != recs[i].Version {
			out = append(out, recs[i].Version)
		}
	}
	return out
}

// TestOlderSpecCannotTakeBack: a rolling deploy switched job from spec A
// to spec B; an instance restarted with the old config (A) must not record
// A again — it refuses, says so in its job status, and B keeps running.
// With prune, the refusal must survive the runs' pruning (version records
// are not pruned).
//
// Each case runs in a synctest bubble: the 1 s settle of the switch and
// the 3 s B must keep running after the old config restarted are virtual
// time.
func TestOlderSpecCannotTakeBack(t *testing.T) {
	for _, prune := range []bool{false, true} {
		name := map[bool]string{false: "history kept", true: "runs pruned"}[prune]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := memory.New()
				l := schedule.NamespaceLedger(b, "default")
				fx := newEffects()
				var logs testkit.Buffer
				mk := func(instance, spec string, rev int) *schedule.Scheduler {
					s := newScheduler(t, b, instance, schedule.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
					if err := s.Register(schedule.Job{Name: "job", Schedule: spec, Revision: rev,
						Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }}); err != nil {
						t.Fatal(err)
					}
					return s
				}
				a, _ := schedule.Parse("@every 100ms", "")
				bspec, _ := schedule.Parse("@every 150ms", "")
				old := mk("old", "@every 100ms", 0)
				start(t, old)
				eventually.True(t, 10*time.Second, "A runs", func() bool { return fx.count() >= 3 })
				newer := mk("new", "@every 150ms", 0)
				start(t, newer)
				eventually.True(t, 20*time.Second, "B runs after the switch", func() bool {
					for _, k := range fx.instants() {
						if k%100 != 0 && fx.get(time.UnixMilli(k))[0].Instance == "new" {
							return true
						}
					}
					return false
				})
				if err := old.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
				if prune {
					if _, err := b.Prune(context.Background(), time.Now().Add(time.Hour), 10000); err != nil {
						t.Fatal(err)
					}
					// Version records are not history: Prune leaves them
					// (docs/records.md).
					if got := versionRecords(t, l, "job"); len(got) != 2 {
						t.Fatalf("after prune, the version records are %v, want both", got)
					}
				}
				restarted := mk("old-again", "@every 100ms", 0)
				restartedAt := time.Now()
				start(t, restarted)
				eventually.True(t, 10*time.Second, "the restarted old instance reports the refusal", func() bool {
					js := restarted.JobStatuses(0)
					return len(js) == 1 && js[0].VersionRefused
				})
				if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "schedule version REFUSED") || !strings.Contains(l, "version="+a.Version()) {
					t.Fatalf("the refusal was not logged as an error by the restarted instance:\n%s", l)
				}
				js := restarted.JobStatuses(0)[0]
				if js.Version != a.Version() || js.CurrentVersion != bspec.Version() {
					t.Fatalf("status version %s current %s, want %s refused in favour of %s", js.Version, js.CurrentVersion, a.Version(), bspec.Version())
				}
				// B keeps running well past the settle time (1 s) after the
				// restart, and no instant of A alone runs after the switch.
				eventually.True(t, 20*time.Second, "B still runs 3 s after the old config restarted", func() bool {
					for _, k := range fx.instants() {
						if time.UnixMilli(k).After(restartedAt.Add(3*time.Second)) && k%150 == 0 && fx.get(time.UnixMilli(k))[0].Instance == "new" {
							return true
						}
					}
					return false
				})
				for _, k := range fx.instants() {
					if time.UnixMilli(k).After(restartedAt) && k%150 != 0 {
						t.Fatalf("instant %d (A's only) ran on %s after B took over", k, fx.get(time.UnixMilli(k))[0].Instance)
					}
				}
				if got := versionRecords(t, l, "job"); len(got) > 0 && got[len(got)-1] != bspec.Version() {
					t.Fatalf("recorded versions %v: the old spec took back", got)
				}
				// A deliberate return to A: a new revision is a new version.
				if err := restarted.Replace(schedule.Job{Name: "job", Schedule: "@every 100ms", Revision: 1,
					Func: func(_ context.Context, r schedule.Run) error { fx.add(r); return nil }}); err != nil {
					t.Fatal(err)
				}
				eventually.True(t, 10*time.Second, "revision 1 of A is recorded as the current version", func() bool {
					js := restarted.JobStatuses(0)
					return len(js) == 1 && !js[0].VersionRefused && js[0].CurrentVersion == js[0].Version && js[0].Version != a.Version()
				})
			})
		})
	}
}
