package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

func claimOf(job string, at time.Time) backend.ClaimRequest {
	return backend.ClaimRequest{Job: job, ScheduledAt: at, SpecVersion: "v1",
		Owner: backend.Owner{Instance: "w", Nonce: backend.NewNonce()}, TTL: time.Minute}
}

// TestBackgroundPrepareOncePerStatement: a burst of first claims on a fresh
// backend (every claim's statements not prepared yet) starts at most one
// background prepare per statement, and none of the claims waits for it:
// the prepares are held until every claim has returned. One job per claim:
// the statements are the same for every job, and claims of one job queue
// on its row (32 first claims of one job, every statement unprepared, hit
// InnoDB's 50 s lock wait timeout in some runs, with no prepare sent).
func TestBackgroundPrepareOncePerStatement(t *testing.T) {
	b, _ := openTest(t)
	t.Cleanup(func() { b.Close() })
	var (
		mu      sync.Mutex
		started = map[string]int{}
		release = make(chan struct{})
		once    sync.Once
	)
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // before Close, which waits for the prepares
	b.stmts.preparing = func(q string) {
		mu.Lock()
		started[q]++
		mu.Unlock()
		<-release
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 32
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.Claim(ctx, claimOf(fmt.Sprintf("burst/%d", i), base))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("claim: %v", err)
		}
	}
	mu.Lock()
	if len(started) == 0 {
		t.Error("no background prepare started")
	}
	for q, k := range started {
		if k > 1 {
			t.Errorf("%d background prepares of %.60q…, want at most 1", k, q)
		}
	}
	queries := len(started)
	mu.Unlock()
	open()
	eventually.True(t, 30*time.Second, "the held prepares are cached", func() bool {
		b.stmts.mu.Lock()
		defer b.stmts.mu.Unlock()
		return len(b.stmts.m) >= queries
	})
	// The next claim runs through the cache and starts no prepare.
	if _, err := b.Claim(ctx, claimOf("burst", base.Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for q, k := range started {
		if k > 1 {
			t.Errorf("after the cache filled: %d background prepares of %.60q…", k, q)
		}
	}
}

// TestBackgroundPrepareAfterClose: a background prepare that completes
// while Close runs is waited for by Close, and its statement is closed, not
// cached; no prepare goroutine is left.
func TestBackgroundPrepareAfterClose(t *testing.T) {
	b, _ := openTest(t)
	var (
		mu      sync.Mutex
		made    []*sql.Stmt
		release = make(chan struct{})
		once    sync.Once
	)
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open)
	t.Cleanup(func() { b.Close() })
	b.stmts.prepared = func(q string, s *sql.Stmt) {
		mu.Lock()
		made = append(made, s)
		mu.Unlock()
		<-release
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := b.Claim(ctx, claimOf("close", time.Now().Add(-time.Minute))); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, "a background prepare completed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(made) > 0
	})
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		b.Close()
	}()
	eventually.True(t, 30*time.Second, "Close began", func() bool {
		b.stmts.mu.Lock()
		defer b.stmts.mu.Unlock()
		return b.stmts.closed
	})
	select {
	case <-closed:
		t.Fatal("Close returned while a background prepare was in flight")
	default:
	}
	open()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close did not return after the prepares were let go")
	}
	mu.Lock()
	defer mu.Unlock()
	for i, s := range made {
		if _, err := s.ExecContext(context.Background()); err == nil || !strings.Contains(err.Error(), "statement is closed") {
			t.Errorf("statement %d prepared across Close: Exec = %v, want the statement closed", i, err)
		}
	}
	b.stmts.mu.Lock()
	if len(b.stmts.m) != 0 {
		t.Errorf("%d statements cached after Close", len(b.stmts.m))
	}
	b.stmts.mu.Unlock()
	eventually.True(t, 30*time.Second, "no background prepare goroutine left", func() bool {
		buf := make([]byte, 1<<20)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "mysql.(*Backend).prepareInBackground")
	})
}

// TestFirstClaimsOfOneJobDoNotStall: 32 concurrent first claims of one job
// on a fresh backend all succeed. Each prepares the record's SELECT on the
// pool and all but one close theirs; that close waits for the connection it
// was prepared on, which by then may be a claim's transaction queued on the
// job's row. The cache closed it while holding its mutex, which the row's
// holder needed for its next statement: every run or so under -race, the
// claims failed with InnoDB's lock wait timeout (1205) after 50 s.
func TestFirstClaimsOfOneJobDoNotStall(t *testing.T) {
	for round := range 3 {
		b, _ := openTest(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		base := time.Now().Add(-time.Hour).Truncate(time.Second)
		const n = 32
		errs := make(chan error, n)
		for i := range n {
			go func() {
				_, err := b.Claim(ctx, claimOf("one", base.Add(time.Duration(i)*time.Millisecond)))
				errs <- err
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Errorf("round %d: claim: %v", round, err)
			}
		}
		cancel()
		b.Close()
		if t.Failed() {
			return
		}
	}
}
