package cronwrap_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/adapter/cronwrap"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/schedule"
)

// lateCron is a per-second cron whose every job starts late by late (the
// late timer being simulated: a loaded host, a GC pause).
func lateCron(late time.Duration) *cron.Cron {
	return cron.New(cron.WithSeconds(), cron.WithChain(func(j cron.Job) cron.Job {
		return cron.FuncJob(func() { time.Sleep(late); j.Run() })
	}))
}

func add(t *testing.T, c *cron.Cron, b backend.Ledger, name string, j cron.Job) {
	t.Helper()
	_, err := cronwrap.Add(c, "* * * * * *", "report", func(context.Context, leasehold.Token) error { j.Run(); return nil },
		cronwrap.Options{Ledger: b, Instance: name})
	if err != nil {
		t.Fatal(err)
	}
}

func TestOnceAcrossInstances(t *testing.T) {
	b := memory.New()
	var mu sync.Mutex
	ran := map[int64]int{}
	var crons []*cron.Cron
	for i := range 3 {
		late := time.Duration(i) * 150 * time.Millisecond
		c := lateCron(late)
		add(t, c, b, fmt.Sprint("n", i), cron.FuncJob(func() {
			mu.Lock()
			ran[time.Now().Add(-late).Truncate(time.Second).Unix()]++
			mu.Unlock()
		}))
		c.Start()
		crons = append(crons, c)
	}
	waitFor(t, 4, &mu, func() int { return len(ran) })
	for _, c := range crons {
		<-c.Stop().Done()
	}
	mu.Lock()
	defer mu.Unlock()
	for sec, n := range ran {
		if n != 1 {
			t.Fatalf("occurrence %v ran %d times", time.Unix(sec, 0).UTC(), n)
		}
	}
	runs, _ := b.ListRuns(context.Background(), backend.RunFilter{Job: "report", State: backend.Succeeded})
	if len(runs) < len(ran) {
		t.Fatalf("ledger has %d succeeded runs for %d occurrences", len(runs), len(ran))
	}
	for _, r := range runs {
		if !r.ScheduledAt.Equal(r.ScheduledAt.Truncate(time.Second)) {
			t.Fatalf("run %v is not at a scheduled instant of the spec", r.ScheduledAt)
		}
	}
}

// A backend error used to skip the occurrence everywhere with nothing said.
// It must reach the log and the OnError hook, naming the job and instant.
func TestBackendErrorIsSurfaced(t *testing.T) {
	b, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "l.db"))
	if err != nil {
		t.Fatal(err)
	}
	_ = b.Close() // the backend is gone
	var logBuf testkit.Buffer
	var mu sync.Mutex
	var hooked []error
	c := cron.New(cron.WithSeconds())
	_, err = cronwrap.Add(c, "* * * * * *", "report", func(context.Context, leasehold.Token) error {
		t.Error("ran without a claim")
		return nil
	}, cronwrap.Options{Ledger: b, Instance: "a", Logger: slog.New(slog.NewTextHandler(&logBuf, nil)),
		OnError: func(job string, at time.Time, err error) {
			mu.Lock()
			defer mu.Unlock()
			if job != "report" || at.IsZero() || !at.Equal(at.Truncate(time.Second)) {
				t.Errorf("OnError(%q, %v): want job report at a whole second", job, at)
			}
			hooked = append(hooked, err)
		}})
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	waitFor(t, 1, &mu, func() int { return len(hooked) })
	<-c.Stop().Done()
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(hooked[0], backend.ErrClosed) {
		t.Fatalf("OnError got %v, want the backend's ErrClosed", hooked[0])
	}
	if !strings.Contains(logBuf.String(), "level=ERROR") || !strings.Contains(logBuf.String(), "job=report") {
		t.Fatalf("log %q: want an ERROR naming the job", logBuf.String())
	}
}

// The job gets its fencing token, and its namespace keeps its runs apart.
func TestTokenAndNamespace(t *testing.T) {
	b := memory.New()
	var mu sync.Mutex
	var tokens []leasehold.Token
	c := cron.New(cron.WithSeconds())
	_, err := cronwrap.Add(c, "* * * * * *", "report", func(ctx context.Context, tok leasehold.Token) error {
		mu.Lock()
		tokens = append(tokens, tok)
		mu.Unlock()
		return nil
	}, cronwrap.Options{Ledger: b, Instance: "a", Namespace: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	waitFor(t, 1, &mu, func() int { return len(tokens) })
	<-c.Stop().Done()
	runs, err := schedule.NamespaceLedger(b, "billing").ListRuns(context.Background(), backend.RunFilter{Job: "report"})
	if err != nil || len(runs) == 0 {
		t.Fatalf("namespace billing has runs %v, %v", runs, err)
	}
	if d, _ := b.ListRuns(context.Background(), backend.RunFilter{Job: "report"}); len(d) != 0 {
		t.Fatalf("the default namespace has %d runs of report", len(d))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range runs {
		if leasehold.Token(r.Token) == tokens[0] {
			return
		}
	}
	t.Fatalf("token %v given to the job is not any run's token (%v)", tokens[0], runs)
}

func TestAddRefusesEvery(t *testing.T) {
	c := cron.New()
	_, err := cronwrap.Add(c, "@every 1m", "report", func(context.Context, leasehold.Token) error { return nil },
		cronwrap.Options{Ledger: memory.New(), Instance: "a"})
	if !errors.Is(err, cronwrap.ErrSpecEvery) || !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("Add(@every 1m) = %v, want ErrSpecEvery", err)
	}
	if n := len(c.Entries()); n != 0 {
		t.Fatalf("the refused job left %d entries", n)
	}
	_, err = cronwrap.Add(c, "* * * *", "report", func(context.Context, leasehold.Token) error { return nil },
		cronwrap.Options{Ledger: memory.New(), Instance: "a"})
	if !errors.Is(err, leasehold.ErrInvalid) || !strings.Contains(err.Error(), `"* * * *"`) {
		t.Fatalf("Add(bad spec) = %v, want ErrInvalid naming the spec", err)
	}
}

func ExampleAdd() {
	b := memory.New() // in production: a backend the instances share
	c := cron.New()
	_, err := cronwrap.Add(c, "30 2 * * *", "nightly-report", func(ctx context.Context, token leasehold.Token) error {
		return nil // send the report; pass token to a sink that rejects lower tokens
	}, cronwrap.Options{Ledger: b, Instance: "web-1"})
	fmt.Println(err)
	// Output: <nil>
}
