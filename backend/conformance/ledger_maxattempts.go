package conformance

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// maxAttemptsReq is a Reclaim of job@at by o, bounded to max attempts.
func maxAttemptsReq(job string, at time.Time, o backend.Owner, ttl time.Duration, max int) backend.ClaimRequest {
	req := claimReq(job, at, o, ttl)
	req.MaxAttempts = max
	return req
}

// checkReclaimMaxAttempts: Reclaim honours MaxAttempts in the same atomic
// step as the take-over. A reclaimer that decided from a stale view (it
// read attempt 1 of a bound of 2, and meanwhile another reclaimed attempt 2
// whose runner died too) is refused with ErrExhausted and changes nothing,
// so the occurrence never runs more than MaxAttempts attempts; a retry
// answered "yours" is not refused; an exhausted occurrence can then be
// abandoned. A negative bound is invalid.
func checkReclaimMaxAttempts(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	short := e.ttl(200 * time.Millisecond)
	a, c, d := owner("a"), owner("c"), owner("d")
	at := past(3 * time.Second)
	_, err := b.Claim(ctx, claimReq("bounded", at, a, short))
	mustNil(t, err, "Claim of the occurrence (attempt 1)")

	_, _, err = b.Reclaim(ctx, maxAttemptsReq("bounded", at, c, short, -1))
	mustIs(t, err, backend.ErrInvalid, "Reclaim with MaxAttempts -1")

	var g2 backend.Grant
	var r2 backend.Run
	eventually(t, 10*time.Second+short, "Reclaim with MaxAttempts 2 once attempt 1's lease expired", func() bool {
		g2, r2, err = b.Reclaim(ctx, maxAttemptsReq("bounded", at, c, short, 2))
		return err == nil
	})
	if r2.Attempt != 2 || r2.Owner != c {
		t.Fatalf("Reclaim with MaxAttempts 2 = %+v, want attempt 2, owner c", r2)
	}
	// A retry by the same nonce answers "yours", whatever the bound.
	g, _, err := b.Reclaim(ctx, maxAttemptsReq("bounded", at, c, short, 1))
	mustNil(t, err, "retried Reclaim with MaxAttempts 1 (a retry of the applied attempt 2)")
	if g.Token != g2.Token {
		t.Fatalf("retried Reclaim answered token %d, want %d", g.Token, g2.Token)
	}

	// The stale reclaimer: it still believes the occurrence is at attempt
	// 1 of 2. Once attempt 2's lease expired it must be refused, not be
	// attempt 3.
	eventually(t, 10*time.Second+short, "attempt 2's lease expires", func() bool {
		r, err := b.GetRun(ctx, "bounded", at)
		return err == nil && r.Expired
	})
	_, r3, err := b.Reclaim(ctx, maxAttemptsReq("bounded", at, d, short, 2))
	mustIs(t, err, backend.ErrOccurrenceExhausted, fmt.Sprintf("Reclaim with MaxAttempts 2 of an occurrence at attempt 2 (answered %+v)", r3))
	r, err := b.GetRun(ctx, "bounded", at)
	mustNil(t, err, "GetRun after a Reclaim refused as exhausted")
	if r.Owner != c || r.Token != g2.Token || r.Attempt != 2 || r.State != backend.Running {
		t.Fatalf("a Reclaim refused as exhausted changed the run: %+v, want owner c, token %d, attempt 2, running", r, g2.Token)
	}
	// Without a bound (or with a greater one) it is still reclaimable:
	// ErrExhausted is the bound's answer, not the record's.
	_, r4, err := b.Reclaim(ctx, maxAttemptsReq("bounded", at, d, short, 3))
	mustNil(t, err, "Reclaim with MaxAttempts 3 of an occurrence at attempt 2")
	if r4.Attempt != 3 || r4.Owner != d {
		t.Fatalf("Reclaim with MaxAttempts 3 = %+v, want attempt 3, owner d", r4)
	}
	eventually(t, 10*time.Second+short, "attempt 3's lease expires", func() bool {
		r, err := b.GetRun(ctx, "bounded", at)
		return err == nil && r.Expired
	})
	_, _, err = b.Reclaim(ctx, maxAttemptsReq("bounded", at, c, short, 3))
	mustIs(t, err, backend.ErrOccurrenceExhausted, "Reclaim with MaxAttempts 3 of an occurrence at attempt 3")
	ab, err := b.Abandon(ctx, "bounded", at)
	mustNil(t, err, "Abandon of the exhausted occurrence")
	if ab.State != backend.Abandoned || ab.Attempt != 3 {
		t.Fatalf("Abandon = %+v, want abandoned at attempt 3", ab)
	}
}

// checkReclaimMaxAttemptsRace: reclaimers that never read the record —
// each decides from the same stale view, and takes over whatever expired —
// race over several occurrences whose runners keep dying (short leases).
// Each occurrence is reclaimed exactly MaxAttempts − 1 times, its record
// ends at attempt MaxAttempts, and every reclaimer ends with ErrExhausted.
func checkReclaimMaxAttemptsRace(t T, e *env) {
	b, ctx := e.newLedger(t), e.ctx()
	short := e.ttl(200 * time.Millisecond)
	const (
		jobs        = 3
		reclaimers  = 4
		maxAttempts = 3
	)
	at := past(3 * time.Second)
	job := func(i int) string { return "stale" + string(rune('a'+i)) }
	for i := range jobs {
		_, err := b.Claim(ctx, claimReq(job(i), at, owner("a"), short))
		mustNil(t, err, "Claim of the occurrence (attempt 1)")
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		won      [jobs]int
		failures []error
	)
	deadline := time.Now().Add(maxAttempts*(10*time.Second+short) + 10*time.Second)
	for i := range jobs {
		for range reclaimers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					// A fresh owner each time: a reclaimer that won and
					// died is a new one when it comes back.
					_, r, err := b.Reclaim(ctx, maxAttemptsReq(job(i), at, owner("r"), short, maxAttempts))
					var failure error
					switch {
					case err == nil && r.Attempt <= maxAttempts:
						mu.Lock()
						won[i]++
						mu.Unlock()
					case err == nil:
						failure = fmt.Errorf("job %s: Reclaim with MaxAttempts %d won attempt %d", job(i), maxAttempts, r.Attempt)
					case errors.Is(err, backend.ErrOccurrenceExhausted):
						return
					case !errors.Is(err, backend.ErrLeaseNotExpired):
						failure = fmt.Errorf("job %s: Reclaim: %w", job(i), err)
					case time.Now().After(deadline):
						failure = fmt.Errorf("job %s: a reclaimer was not refused as exhausted by %v", job(i), deadline)
					}
					if failure != nil {
						mu.Lock()
						failures = append(failures, failure)
						mu.Unlock()
						return
					}
					time.Sleep(2 * time.Millisecond)
				}
			}()
		}
	}
	wg.Wait()
	for _, err := range failures {
		t.Errorf("%v", err)
	}
	for i := range jobs {
		r, err := b.GetRun(ctx, job(i), at)
		mustNil(t, err, "GetRun after the race")
		if r.Attempt != maxAttempts || won[i] != maxAttempts-1 {
			t.Errorf("job %s: %d reclaims won, record at attempt %d; want %d and %d", job(i), won[i], r.Attempt, maxAttempts-1, maxAttempts)
		}
	}
}
