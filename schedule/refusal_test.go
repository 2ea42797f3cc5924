package schedule_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/internal/testkit/faultbackend"
	"github.com/leasehold/leasehold/schedule"
)

// TestRefusalIsSaidWhereAndFor: an instance that refuses its version
// states it for every instance to read (ReadRefusals) for as long as it
// refuses — hours later still — and withdraws it when it stops refusing:
// a reload with the current spec, a removal of the job, a shutdown. A
// restarted process with the current config states nothing. A refusing
// process that dies withdraws nothing: its statement lapses within the
// statement's lease (refusalTTL). Virtual time: hours pass in a bubble.
func TestRefusalIsSaidWhereAndFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memory.New()
		t.Cleanup(func() { b.Close() })
		l := schedule.NamespaceLedger(b, "default")
		job := func(spec string) schedule.Job {
			return schedule.Job{Name: "job", Schedule: spec, Func: func(context.Context, schedule.Run) error { return nil }}
		}
		mk := func(instance, spec string) *schedule.Scheduler {
			s := newScheduler(t, b, instance)
			if err := s.Register(job(spec)); err != nil {
				t.Fatal(err)
			}
			start(t, s)
			return s
		}
		read := func() []schedule.Refusal {
			t.Helper()
			r, err := schedule.ReadRefusals(context.Background(), b, "default", "job")
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		refused := func(s *schedule.Scheduler) bool {
			js := s.JobStatuses(0)
			return len(js) == 1 && js[0].VersionRefused
		}
		first := mk("first", "@every 1h")
		eventually.True(t, 5*time.Second, "the first version recorded", func() bool { return len(versionRecords(t, l, "job")) == 1 })
		second := mk("second", "@every 2h")
		defer second.Shutdown(context.Background())
		eventually.True(t, 5*time.Second, "the second version recorded", func() bool { return len(versionRecords(t, l, "job")) == 2 })
		_ = first.Shutdown(context.Background())
		if r := read(); len(r) != 0 {
			t.Fatalf("refusals before any: %+v", r)
		}
		oldSpec, _ := schedule.Parse("@every 1h", "")
		stated := func() bool {
			r := read()
			return len(r) == 1 && r[0].Instance == "eu/reverted" && r[0].Version == oldSpec.Version()
		}
		reverted := mk("eu/reverted", "@every 1h") // an instance name may hold "/"
		eventually.True(t, 10*time.Second, "the revert refused and stated", func() bool { return refused(reverted) && stated() })
		time.Sleep(5 * time.Hour)
		synctest.Wait()
		if !stated() {
			t.Fatalf("refusals hours later: %+v; want eu/reverted refusing %s", read(), oldSpec.Version())
		}
		// Another job whose name extends this one's shows none of it.
		if r, err := schedule.ReadRefusals(context.Background(), b, "default", "job/eu"); err != nil || len(r) != 0 {
			t.Fatalf("refusals of job/eu: %+v, %v", r, err)
		}
		// A reload with the current spec withdraws it.
		if err := reverted.Replace(job("@every 2h")); err != nil {
			t.Fatal(err)
		}
		eventually.True(t, 10*time.Second, "the refusal withdrawn by the reload", func() bool { return len(read()) == 0 })
		// Refused again by a reload; withdrawn by a removal of the job.
		if err := reverted.Replace(job("@every 1h")); err != nil {
			t.Fatal(err)
		}
		eventually.True(t, 10*time.Second, "refused again", func() bool { return refused(reverted) && stated() })
		if err := reverted.Remove("job"); err != nil {
			t.Fatal(err)
		}
		eventually.True(t, 10*time.Second, "the refusal withdrawn by the removal", func() bool { return len(read()) == 0 })
		// Refused once more; withdrawn by the shutdown; a restart with the
		// current config states nothing.
		if err := reverted.Register(job("@every 1h")); err != nil {
			t.Fatal(err)
		}
		eventually.True(t, 10*time.Second, "refused once more", func() bool { return refused(reverted) && stated() })
		_ = reverted.Shutdown(context.Background())
		if r := read(); len(r) != 0 {
			t.Fatalf("refusals after the refusing instance shut down: %+v", r)
		}
		restarted := mk("eu/reverted", "@every 2h")
		time.Sleep(time.Minute)
		if r := read(); len(r) != 0 {
			t.Fatalf("refusals after a restart with the current config: %+v", r)
		}
		_ = restarted.Shutdown(context.Background())
		// A refusing process that dies (its renewals stop, it releases
		// nothing): its statement lives out its lease, then lapses.
		dh, die := dying(b)
		dead := newScheduler(t, dh, "eu/dying")
		if err := dead.Register(job("@every 1h")); err != nil {
			t.Fatal(err)
		}
		start(t, dead)
		statedByDying := func() bool {
			r := read()
			return len(r) == 1 && r[0].Instance == "eu/dying" && r[0].Version == oldSpec.Version()
		}
		eventually.True(t, 10*time.Second, "the dying instance refusing and stated", func() bool { return refused(dead) && statedByDying() })
		time.Sleep(5 * time.Minute) // kept by its renewals
		synctest.Wait()
		if !statedByDying() {
			t.Fatalf("refusals while the refusing process lives: %+v; want eu/dying refusing %s", read(), oldSpec.Version())
		}
		die()
		synctest.Wait()
		if !statedByDying() {
			t.Fatalf("refusals as the refusing process dies: %+v; want its statement until its lease lapses", read())
		}
		time.Sleep(refusalTTL) // the lease of its last renewal, made before it died
		synctest.Wait()
		if r := read(); len(r) != 0 {
			t.Fatalf("refusals %v after the refusing process died: %+v; want none (its lease lapsed)", refusalTTL, r)
		}
	})
}

// refusalTTL is the lease of a refusal statement (schedule/refusal.go):
// how long it outlives a process that died.
const refusalTTL = 30 * time.Second

// dying is a process's backend handle that can die: once die has been
// called, every call fails, so the process renews nothing and releases
// nothing, as one killed without a word. (Nothing closes it: a Scheduler
// leaves its backend to its owner.)
func dying(b backend.Backend) (fb *faultbackend.Backend, die func()) {
	var dead atomic.Bool
	return &faultbackend.Backend{Next: b,
		OnCall: func(context.Context, string) error {
			if dead.Load() {
				return errDied
			}
			return nil
		}}, func() { dead.Store(true) }
}

var errDied = errors.New("the process died")
