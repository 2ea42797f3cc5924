package cronwrap_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/leasehold/leasehold/adapter/cronwrap"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
)

func TestOnceAcrossInstances(t *testing.T) {
	b := memory.New()
	var mu sync.Mutex
	ran := map[int64]int{}
	var crons []*cron.Cron
	for i := range 3 {
		c := cron.New(cron.WithSeconds())
		late := time.Duration(i) * 150 * time.Millisecond // later timers, as on a loaded host
		_, err := c.AddJob("* * * * * *", cron.NewChain(cron.DelayIfStillRunning(cron.DefaultLogger), func(j cron.Job) cron.Job {
			return cron.FuncJob(func() { time.Sleep(late); j.Run() }) // the late timer being simulated
		}, cronwrap.Once(b, "report", fmt.Sprint("n", i), time.Second)).Then(cron.FuncJob(func() {
			mu.Lock()
			ran[time.Now().Add(-400*time.Millisecond).Round(time.Second).Unix()]++
			mu.Unlock()
		})))
		if err != nil {
			t.Fatal(err)
		}
		c.Start()
		crons = append(crons, c)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(ran)
		mu.Unlock()
		if n >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range crons {
		<-c.Stop().Done()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) < 4 {
		t.Fatalf("only %d occurrences ran", len(ran))
	}
	for sec, n := range ran {
		if n != 1 {
			t.Fatalf("occurrence %v ran %d times", time.Unix(sec, 0).UTC(), n)
		}
	}
	runs, _ := b.ListRuns(context.Background(), backend.RunFilter{Job: "report", State: backend.Succeeded})
	if len(runs) < len(ran) {
		t.Fatalf("ledger has %d succeeded runs for %d occurrences", len(runs), len(ran))
	}
}

func ExampleOnce() {
	b := memory.New() // in production: a backend the instances share
	c := cron.New()
	_, err := c.AddJob("30 2 * * *", cron.NewChain(cronwrap.Once(b, "nightly-report", "web-1", time.Minute)).
		Then(cron.FuncJob(func() { /* send the report */ })))
	fmt.Println(err)
	// Output: <nil>
}
