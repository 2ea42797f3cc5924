package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/mysql"
	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// Occurrence-claim benchmarks: 5 scheduler instances (5 backends, each with
// its own connection pool, as 5 processes would have) claim the same 1,000
// occurrences of one job, each instance walking them in the same order, as
// schedulers whose timers fire at the same instants do. One benchmark
// iteration is one round of 1,000 fresh occurrences (5,000 claim attempts).
//
//	cd bench && go test -run '^$' -bench 'Claims' -benchtime 3x
//
// Reported: occurrences/s (occurrences claimed per second of the round),
// attempts/s, and dups (occurrences won by more than one instance) and
// missed (won by none), both summed over all rounds; the benchmark fails
// when either is not 0. The floor is the bare statement: PostgreSQL
// INSERT … ON CONFLICT DO NOTHING RETURNING, MariaDB a plain INSERT whose
// duplicate-key error (1062) means "lost".

const (
	claimInstances   = 5
	claimOccurrences = 1000
)

// claimFunc claims occurrence (job, at) for instance i: won reports
// whether this call claimed it.
type claimFunc func(ctx context.Context, i int, job string, at time.Time) (won bool, err error)

// runClaims runs b.N rounds and reports the rates and the duplicates.
func runClaims(b *testing.B, claim claimFunc) {
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	var dups, missed int
	var elapsed time.Duration
	b.ResetTimer()
	for round := 0; round < b.N; round++ {
		wins := make([][claimInstances]bool, claimOccurrences)
		var wg sync.WaitGroup
		errs := make(chan error, claimInstances)
		t0 := time.Now()
		for i := range claimInstances {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for o := range claimOccurrences {
					at := base.Add(time.Duration(round*claimOccurrences+o) * time.Millisecond)
					won, err := claim(ctx, i, "bench/claims", at)
					if err != nil {
						errs <- fmt.Errorf("instance %d, occurrence %d: %w", i, o, err)
						return
					}
					wins[o][i] = won
				}
			}()
		}
		wg.Wait()
		elapsed += time.Since(t0)
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		for _, w := range wins {
			n := 0
			for _, x := range w {
				if x {
					n++
				}
			}
			switch {
			case n == 0:
				missed++
			case n > 1:
				dups += n - 1
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*claimOccurrences)/elapsed.Seconds(), "occurrences/s")
	b.ReportMetric(float64(b.N*claimOccurrences*claimInstances)/elapsed.Seconds(), "attempts/s")
	b.ReportMetric(float64(dups), "dups")
	b.ReportMetric(float64(missed), "missed")
	if dups != 0 || missed != 0 {
		b.Fatalf("%d occurrences claimed more than once, %d by nobody", dups, missed)
	}
}

// leaseholdClaims claims through the backends' Claim (one backend per
// instance). maxLate > 0 sets ClaimRequest.MaxLate, as the scheduler's
// claims always do (the misfire grace or window).
func leaseholdClaims(bes []backend.Ledger, maxLate time.Duration) claimFunc {
	owners := make([]backend.Owner, len(bes))
	for i := range owners {
		owners[i] = backend.Owner{Instance: fmt.Sprintf("scheduler-%d", i), Nonce: backend.NewNonce()}
	}
	return func(ctx context.Context, i int, job string, at time.Time) (bool, error) {
		_, err := bes[i].Claim(ctx, backend.ClaimRequest{
			Job: job, ScheduledAt: at, SpecVersion: "v1", Owner: owners[i], TTL: time.Minute, MaxLate: maxLate,
		})
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, backend.ErrOccurrenceClaimed):
			return false, nil
		}
		return false, err
	}
}

func BenchmarkClaimsPostgres(b *testing.B) {
	first := pgBackend(b)
	ctx := context.Background()
	bes := []*postgres.Backend{first}
	u := testserver.PostgresURL(b)
	for range claimInstances - 1 {
		be, err := postgres.Open(ctx, u, postgres.WithSchema(first.Schema()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { be.Close() })
		bes = append(bes, be)
	}
	table := first.Schema() + ".floor_claims"
	if _, err := first.Pool().Exec(ctx, `CREATE TABLE `+table+` (job text COLLATE "C" NOT NULL, scheduled_at timestamptz NOT NULL,
		instance text NOT NULL, PRIMARY KEY (job, scheduled_at))`); err != nil {
		b.Fatal(err)
	}
	var ledgers []backend.Ledger
	for _, be := range bes {
		ledgers = append(ledgers, be)
	}
	floor := func(ctx context.Context, i int, job string, at time.Time) (bool, error) {
		rows, err := bes[i].Pool().Query(ctx, `INSERT INTO `+table+` (job, scheduled_at, instance) VALUES ($1, $2, $3)
			ON CONFLICT DO NOTHING RETURNING 1`, job, at, fmt.Sprintf("scheduler-%d", i))
		if err != nil {
			return false, err
		}
		won := rows.Next()
		rows.Close()
		return won, rows.Err()
	}
	b.Run("leasehold", func(b *testing.B) { runClaims(b, leaseholdClaims(ledgers, 0)) })
	b.Run("floor-insert-on-conflict", func(b *testing.B) { runClaims(b, floor) })
}

func BenchmarkClaimsMySQL(b *testing.B) {
	first := mysqlBackend(b)
	ctx := context.Background()
	bes := []*mysql.Backend{first}
	u := testserver.MySQLURL(b)
	u = u[:strings.LastIndex(u, "/")+1] + first.Database()
	for range claimInstances - 1 {
		be, err := mysql.Open(ctx, u)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { be.Close() })
		bes = append(bes, be)
	}
	if _, err := first.DB().ExecContext(ctx, `CREATE TABLE floor_claims (job VARBINARY(512) NOT NULL, scheduled_at DATETIME(3) NOT NULL,
		instance VARBINARY(128) NOT NULL, PRIMARY KEY (job, scheduled_at)) ENGINE=InnoDB`); err != nil {
		b.Fatal(err)
	}
	var ledgers []backend.Ledger
	for _, be := range bes {
		ledgers = append(ledgers, be)
	}
	floor := func(ctx context.Context, i int, job string, at time.Time) (bool, error) {
		_, err := bes[i].DB().ExecContext(ctx, `INSERT INTO floor_claims (job, scheduled_at, instance) VALUES (?, ?, ?)`,
			job, at, fmt.Sprintf("scheduler-%d", i))
		var me *driver.MySQLError
		switch {
		case err == nil:
			return true, nil
		case errors.As(err, &me) && me.Number == 1062:
			return false, nil
		}
		return false, err
	}
	b.Run("leasehold", func(b *testing.B) { runClaims(b, leaseholdClaims(ledgers, 0)) })
	// The instants are an hour old: a MaxLate of two hours admits them all.
	b.Run("leasehold-maxlate", func(b *testing.B) { runClaims(b, leaseholdClaims(ledgers, 2*time.Hour)) })
	b.Run("floor-insert-1062", func(b *testing.B) { runClaims(b, floor) })
}
