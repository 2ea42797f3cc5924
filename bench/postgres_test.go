package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// SQL benchmarks: leasehold's Locker (TryAcquire + Release) on PostgreSQL
// and MariaDB against the floor of the statements such a lock cannot do
// without, on the same pool and the machine's shared database services:
//
//	cd bench && go test -run '^$' -bench 'Postgres|MySQL' -benchtime 1s
//
// Each goroutine has its own key (uncontended). "leasehold" is the Locker
// (TryAcquire + Lock.Release, with its watchdog); "leasehold-backend" is the
// backend's Acquire + Release called directly. Besides ns/op, p50-ns and
// p99-ns are the per-operation latency percentiles. Nothing is asserted
// about timings.

// sqlPool is the connection pool size of the SQL benchmarks (both the
// leasehold backend and the floors share it).
const sqlPool = 32

// lockerPair is one acquire+release through leasehold's Locker.
func lockerPair(be backend.Leases) pair {
	lk, err := leasehold.NewLocker(be, leasehold.WithInstance("bench"), leasehold.WithTTL(ttl))
	if err != nil {
		panic(err)
	}
	return func(ctx context.Context, key string) error {
		l, err := lk.TryAcquire(ctx, key)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
}

// runLatency is run (bench_test.go) with per-operation latencies reported
// as p50-ns and p99-ns.
func runLatency(b *testing.B, p pair, goroutines int) {
	var (
		mu  sync.Mutex
		all []time.Duration
	)
	var seq atomic.Int64
	timed := func(ctx context.Context, key string) error {
		t0 := time.Now()
		err := p(ctx, key)
		d := time.Since(t0)
		// Keep the first 1M samples; later ones are not recorded.
		if seq.Add(1) <= 1<<20 {
			mu.Lock()
			all = append(all, d)
			mu.Unlock()
		}
		return err
	}
	run(b, timed, goroutines)
	b.StopTimer()
	slices.Sort(all)
	b.ReportMetric(float64(pct(all, 0.50).Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(pct(all, 0.99).Nanoseconds()), "p99-ns")
}

// pgBackend opens leasehold's PostgreSQL backend in a fresh schema of the
// shared server (dropped at the end of the benchmark).
func pgBackend(b *testing.B) *postgres.Backend {
	u := testserver.PostgresURL(b)
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	u += fmt.Sprintf("%spool_max_conns=%d", sep, sqlPool)
	schema := "lh_bench_" + backend.NewNonce().String()[:16]
	ctx := context.Background()
	be, err := postgres.Open(ctx, u, postgres.WithSchema(schema))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if _, err := be.Pool().Exec(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`); err != nil {
			b.Errorf("drop schema %s: %v", schema, err)
		}
		be.Close()
	})
	if _, err := be.Pool().Exec(ctx, `CREATE TABLE `+schema+`.floor (key text COLLATE "C" PRIMARY KEY, token bigint NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	// Open the whole pool now: otherwise the first 64-goroutine benchmark
	// pays for starting 31 server processes inside its timing.
	var conns []*pgxpool.Conn
	for range sqlPool {
		c, err := be.Pool().Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	return be
}

// pgUpsertFloor: one INSERT … ON CONFLICT … RETURNING round trip (the shape
// of leasehold's acquire) plus a DELETE.
func pgUpsertFloor(be *postgres.Backend) pair {
	table := be.Schema() + ".floor"
	return func(ctx context.Context, key string) error {
		var token int64
		if err := be.Pool().QueryRow(ctx, `INSERT INTO `+table+` (key, token) VALUES ($1, 1)
			ON CONFLICT (key) DO UPDATE SET token = `+table+`.token + 1 RETURNING token`, key).Scan(&token); err != nil {
			return err
		}
		_, err := be.Pool().Exec(ctx, `DELETE FROM `+table+` WHERE key = $1`, key)
		return err
	}
}

// pgAdvisoryFloor: pg_try_advisory_lock + pg_advisory_unlock on one pooled
// connection (advisory locks belong to the session).
func pgAdvisoryFloor(be *postgres.Backend) pair {
	return func(ctx context.Context, key string) error {
		c, err := be.Pool().Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		var ok bool
		if err := c.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext($1))`, key).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("advisory floor: %s held", key)
		}
		return c.QueryRow(ctx, `SELECT pg_advisory_unlock(hashtext($1))`, key).Scan(&ok)
	}
}

func BenchmarkPostgres(b *testing.B) {
	be := pgBackend(b)
	impls := []struct {
		name string
		p    pair
	}{
		{"leasehold", lockerPair(be)},
		{"leasehold-backend", leaseholdPair(be)},
		{"floor-upsert+delete", pgUpsertFloor(be)},
		{"floor-advisory", pgAdvisoryFloor(be)},
	}
	for _, g := range []int{1, 64} {
		for _, im := range impls {
			b.Run(fmt.Sprintf("g%d/%s", g, im.name), func(b *testing.B) { runLatency(b, im.p, g) })
		}
	}
}
