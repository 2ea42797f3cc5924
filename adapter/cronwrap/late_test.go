package cronwrap_test

import (
	"sync"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// Two instances of a per-second job whose timers fire 300 ms and 700 ms
// late (a loaded host). Rounding the firing time to the period named the
// first instance's occurrence s and the second's s+1 s, so occurrence s ran
// on both. Each occurrence must run once, whichever instance runs it.
func TestLateTimersRunEachOccurrenceOnce(t *testing.T) {
	b := memory.New()
	var mu sync.Mutex
	ran := map[int64][]string{} // the occurrence a timer fired for -> who ran it
	var crons []*cron.Cron
	for _, n := range []struct {
		name string
		late time.Duration
	}{{"a", 300 * time.Millisecond}, {"b", 700 * time.Millisecond}} {
		c := lateCron(n.late)
		job := cron.FuncJob(func() {
			fired := time.Now().Add(-n.late).Truncate(time.Second)
			mu.Lock()
			ran[fired.Unix()] = append(ran[fired.Unix()], n.name)
			mu.Unlock()
		})
		add(t, c, b, n.name, job)
		c.Start()
		crons = append(crons, c)
	}
	waitFor(t, 4, &mu, func() int { return len(ran) })
	for _, c := range crons {
		<-c.Stop().Done()
	}
	mu.Lock()
	defer mu.Unlock()
	for sec, who := range ran {
		if len(who) > 1 {
			t.Fatalf("occurrence %v ran %d times (%v)", time.Unix(sec, 0).UTC(), len(who), who)
		}
	}
}

// waitFor waits up to 10 s for count() to reach n.
func waitFor(t *testing.T, n int, mu *sync.Mutex, count func() int) {
	t.Helper()
	var got int
	if !eventually.Within(10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		got = count()
		return got >= n
	}) {
		t.Fatalf("only %d of %d occurrences ran within 10 s", got, n)
	}
}
