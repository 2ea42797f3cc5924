// Command gocron runs an existing go-co-op/gocron/v2 job on three
// schedulers (standing in for three instances of a service) sharing one
// SQLite file, with adapter/gocronlock as each job's distributed locker:
// every second's occurrence runs on exactly one of them, however their
// timers fire.
//
//	go run ./gocron [seconds]
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/leasehold/leasehold/adapter/gocronlock"
	"github.com/leasehold/leasehold/backend/sqlite"
)

const spec = "* * * * * *" // every second (gocron's six-field form)

func run(ctx context.Context, out io.Writer, db string, d time.Duration) (map[int64][]string, error) {
	b, err := sqlite.Open(ctx, db)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	var mu sync.Mutex
	ran := map[int64][]string{} // second -> instances that ran it
	var scheds []gocron.Scheduler
	defer func() {
		for _, s := range scheds {
			_ = s.Shutdown()
		}
	}()
	for _, instance := range []string{"web-1", "web-2", "web-3"} {
		// One locker per job, told the job's spec, so it names each
		// occurrence by its scheduled instant.
		l, err := gocronlock.NewJobLocker(b, instance, spec, "UTC")
		if err != nil {
			return nil, err
		}
		s, err := gocron.NewScheduler()
		if err != nil {
			return nil, err
		}
		l.Attach(s) // so that Lock can check the job's definition against the spec
		// l.CronJob() is gocron.CronJob of the locker's spec: written once.
		_, err = s.NewJob(l.CronJob(), gocron.NewTask(func() {
			// The second this run belongs to: timers fire up to 100 ms
			// early and some milliseconds late.
			sec := time.Now().Add(-400 * time.Millisecond).Round(time.Second).Unix()
			mu.Lock()
			ran[sec] = append(ran[sec], instance)
			mu.Unlock()
		}), gocron.WithName("report"), gocron.WithDistributedJobLocker(l))
		if err != nil {
			return nil, err
		}
		s.Start()
		scheds = append(scheds, s)
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	for _, s := range scheds {
		_ = s.Shutdown()
	}
	scheds = nil

	mu.Lock()
	defer mu.Unlock()
	secs := make([]int64, 0, len(ran))
	for s := range ran {
		secs = append(secs, s)
	}
	sort.Slice(secs, func(i, j int) bool { return secs[i] < secs[j] })
	twice := 0
	for _, s := range secs {
		fmt.Fprintf(out, "%s  ran on %v\n", time.Unix(s, 0).UTC().Format("15:04:05"), ran[s])
		if len(ran[s]) > 1 {
			twice++
		}
	}
	fmt.Fprintf(out, "%d occurrences on 3 schedulers, %d run more than once\n", len(secs), twice)
	return ran, nil
}

func main() {
	d := 5 * time.Second
	if len(os.Args) > 1 {
		n, err := strconv.Atoi(os.Args[1])
		if err != nil || n <= 0 {
			log.Fatalf("seconds %q: not a positive number", os.Args[1])
		}
		d = time.Duration(n) * time.Second
	}
	dir, err := os.MkdirTemp("", "leasehold-gocron")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if _, err := run(context.Background(), os.Stdout, filepath.Join(dir, "l.db"), d); err != nil {
		log.Fatal(err)
	}
}
