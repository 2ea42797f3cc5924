package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/cmd/leasehold-lab/benchkit"
)

// benchRedisFlags are the flags of "leasehold-lab bench redis".
type benchRedisFlags struct {
	url        string
	goroutines string
	duration   time.Duration
	crowd      int
	keys       int
	wait       time.Duration
	handovers  int
	poolSize   int
}

func newBenchRedisCmd(a *app) *cobra.Command {
	f := benchRedisFlags{}
	cmd := &cobra.Command{
		Use:   "redis",
		Short: "Measure the Redis backend against the raw floor on one server, in one run",
		Long: `Measure leasehold's Redis backend on the server at --url, in one run and
on one connection pool, against the floor: a raw SET NX PX + DEL, the two
round trips any Redis lock needs.

  uncontended   acquire + release, every goroutine on its own key, for
                each --goroutines value: the Locker (TryAcquire + Release,
                watchdog included), the backend alone, and the floor
  crowd         --crowd goroutines start at once, each tries once to take
                one of --keys keys, waiting at most --wait
  hand-over     holder releases -> blocked waiter's grant, with the
                backend's pushed release events and with polling

It writes under the key prefix "leasehold-bench:" and deletes nothing
else. Peers (bsm/redislock, go-redsync/redsync) are measured side by side
by the Go benchmarks in the repository's bench/ module, which keeps their
dependencies out of this binary:

  cd bench && go test -run '^$' -bench 'Uncontended|Seed|Handover'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			gs, err := parseGoroutines(f.goroutines)
			if err != nil {
				return usageErrorf("--goroutines %q: %v", f.goroutines, err)
			}
			switch {
			case f.duration <= 0:
				return usageErrorf("--duration %s: must be positive", f.duration)
			case f.crowd < 0 || f.keys < 1:
				return usageErrorf("--crowd %d / --keys %d: crowd must be ≥ 0 and keys ≥ 1", f.crowd, f.keys)
			case f.wait <= 0:
				return usageErrorf("--wait %s: must be positive", f.wait)
			case f.handovers < 0:
				return usageErrorf("--handovers %d: must be ≥ 0", f.handovers)
			case f.poolSize < 1:
				return usageErrorf("--pool-size %d: must be ≥ 1", f.poolSize)
			}
			o, err := goredis.ParseURL(f.url)
			if err != nil {
				return usageErrorf("--url: %v", err)
			}
			o.PoolSize = f.poolSize
			o.ContextTimeoutEnabled = true
			return benchRedis(cmd.Context(), cmd.OutOrStdout(), o, gs, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.url, "url", "redis://127.0.0.1:6379/0", "Redis server `URL`")
	fl.StringVar(&f.goroutines, "goroutines", "1,64", "comma-separated goroutine `counts` for the uncontended runs")
	fl.DurationVar(&f.duration, "duration", 2*time.Second, "how long each uncontended run lasts")
	fl.IntVar(&f.crowd, "crowd", 10000, "goroutines in the crowd scenario (0 skips it)")
	fl.IntVar(&f.keys, "keys", 100, "keys the crowd shares")
	fl.DurationVar(&f.wait, "wait", 50*time.Millisecond, "how long each crowd attempt may wait")
	fl.IntVar(&f.handovers, "handovers", 100, "hand-overs to measure per mode (0 skips them)")
	fl.IntVar(&f.poolSize, "pool-size", 128, "connections in the client's pool")
	return cmd
}

func parseGoroutines(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || n > 100000 {
			return nil, fmt.Errorf("%q is not a count from 1 to 100000", p)
		}
		out = append(out, n)
	}
	return out, nil
}

// benchRounds is how many interleaved rounds each uncontended figure sums.
const benchRounds = 4

// pollOnly hides a backend's Notifier, so waiters poll with backoff.
type pollOnly struct{ backend.Backend }

func benchRedis(ctx context.Context, w io.Writer, o *goredis.Options, gs []int, f benchRedisFlags) error {
	c := goredis.NewClient(o)
	defer c.Close()
	be, err := redis.New(c, redis.WithPrefix("leasehold-bench:"))
	if err != nil {
		return fmt.Errorf("redis at %s: %w", o.Addr, err)
	}
	defer be.Close()
	const ttl = 10 * time.Second
	lk, err := leasehold.NewLocker(be, leasehold.WithInstance("bench"), leasehold.WithTTL(ttl))
	if err != nil {
		return err
	}
	// Warm up as a running service would be: every connection dialled,
	// the scripts loaded.
	if _, err := benchkit.Uncontended(ctx, benchkit.LeasePair(be, ttl), o.PoolSize, 200*time.Millisecond); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	floor := func(ctx context.Context, key string) error {
		k := "leasehold-bench:floor:" + key
		ok, err := c.SetNX(ctx, k, "x", ttl).Result()
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("floor: %s is held", k)
		}
		return c.Del(ctx, k).Err()
	}
	locker := func(ctx context.Context, key string) error {
		l, err := lk.TryAcquire(ctx, key)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	fmt.Fprintf(w, "leasehold-lab bench redis: %s, pool %d, %s per run\n\n", o.Addr, o.PoolSize, f.duration)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "uncontended acquire+release\tgoroutines\tns/op\tP50\tP99\t÷ floor")
	impls := []struct {
		name string
		p    benchkit.Pair
	}{{"leasehold Locker", locker}, {"leasehold backend", benchkit.LeasePair(be, ttl)}, {"floor SET NX PX + DEL", floor}}
	for _, g := range gs {
		// Rounds interleave the implementations, so a burst of load on the
		// machine falls on all of them alike.
		res := make([]benchkit.Result, len(impls))
		for range benchRounds {
			for i, im := range impls {
				r, err := benchkit.Uncontended(ctx, im.p, g, f.duration/benchRounds)
				if err != nil {
					return fmt.Errorf("%s, %d goroutines: %w", im.name, g, err)
				}
				res[i] = res[i].Add(r)
			}
		}
		fl := res[len(res)-1]
		for i, im := range impls {
			r := res[i]
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%.2f×\n", im.name, g, r.NsPerOp(), ms(r.P50), ms(r.P99), r.NsPerOp()/fl.NsPerOp())
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if f.crowd > 0 {
		clk, err := leasehold.NewLocker(be, leasehold.WithInstance("crowd"), leasehold.WithTTL(ttl),
			leasehold.WithBackoff(time.Millisecond, 10*time.Millisecond))
		if err != nil {
			return err
		}
		r := benchkit.Crowd(ctx, clk, f.crowd, f.keys, f.wait)
		fmt.Fprintf(w, "\ncrowd: %d goroutines, %d keys, %s wait each\n", f.crowd, f.keys, f.wait)
		fmt.Fprintf(w, "  acquired %d, not acquired %d (of which never sent %d), indeterminate %d, errors %d\n",
			r.Acquired, r.NotAcquired, r.NotSent, r.Indeterminate, r.Errors)
		fmt.Fprintf(w, "  latency P50 %s, P99 %s, P99.9 %s\n", ms(r.P50), ms(r.P99), ms(r.P999))
		if r.FirstError != nil {
			fmt.Fprintf(w, "  first error: %v\n", r.FirstError)
		}
	}
	if f.handovers > 0 {
		fmt.Fprintf(w, "\nhand-over (release -> blocked waiter's grant), %d each\n", f.handovers)
		for _, m := range []struct {
			name string
			be   backend.Backend
		}{{"push (pub/sub release events)", be}, {"poll (library backoff)", pollOnly{be}}} {
			holder, err := leasehold.NewLocker(m.be, leasehold.WithInstance("holder"), leasehold.WithTTL(ttl))
			if err != nil {
				return err
			}
			waiter, err := leasehold.NewLocker(m.be, leasehold.WithInstance("waiter"), leasehold.WithTTL(ttl))
			if err != nil {
				return err
			}
			lat, err := benchkit.Handover(ctx, holder, waiter, "handover", f.handovers)
			if err != nil {
				return fmt.Errorf("hand-over, %s: %w", m.name, err)
			}
			fmt.Fprintf(w, "  %-30s P50 %s  P99 %s\n", m.name, ms(benchkit.Percentile(lat, 0.5)), ms(benchkit.Percentile(lat, 0.99)))
		}
	}
	return nil
}

// ms formats d in milliseconds with microsecond resolution.
func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d.Microseconds())/1000) }
