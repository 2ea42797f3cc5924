package mysql

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/chaos"
)

// Network faults between a lock holder and MySQL/MariaDB, injected by a TCP
// proxy (internal/chaos): the holder's backend is opened through the proxy,
// the observer's and the next holder's directly, on one fresh database.

const chaosTTL = 1500 * time.Millisecond

// chaosPair opens a backend through a proxy (the holder's) and one directly.
func chaosPair(t *testing.T) (p *chaos.Proxy, slow, direct *Backend) {
	t.Helper()
	u := freshDB(t)
	ctx := context.Background()
	direct, err := Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p, err = chaos.New(pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	pu.Host = p.Addr()
	slow, err = Open(ctx, pu.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() }) // before the proxy's Close
	return p, slow, direct
}

func chaosLocker(t *testing.T, b *Backend, name string) *leasehold.Locker {
	t.Helper()
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance(name), leasehold.WithTTL(chaosTTL),
		leasehold.WithBackoff(5*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return lk
}

// serverSample: the server read the lease between local times at (the
// query's send) and recv (its reply) and said it had remaining left (-1
// when not held), so it holds the lease until at least at+remaining;
// "not held" is known to predate recv only.
type serverSample struct {
	at, recv  time.Time
	remaining time.Duration
}

// watchServer samples the lease row of bkey on the direct pool every 5 ms
// until stop is closed, then closes the returned channel.
func watchServer(ctx context.Context, b *Backend, bkey string, stop <-chan struct{}) <-chan serverSample {
	out := make(chan serverSample, 100000)
	go func() {
		defer close(out)
		for {
			select {
			case <-stop:
				return
			default:
			}
			at := time.Now()
			var us *int64
			err := b.DB().QueryRowContext(ctx, `SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at)
				FROM `+b.tLeases+` WHERE k = ?`, bkey).Scan(&us)
			if err == nil {
				s := serverSample{at: at, recv: time.Now(), remaining: -1}
				if us != nil {
					s.remaining = time.Duration(*us) * time.Microsecond
				}
				out <- s
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return out
}

// TestChaosDelayedRenewReplies: every reply to the holder is delayed by
// 0.6×TTL, so renewals are applied at once but confirmed late. The holder's
// context must end while the server still holds the lease (sampled on a
// direct connection), and the next holder gets a greater token.
func TestChaosDelayedRenewReplies(t *testing.T) {
	p, slow, direct := chaosPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lk := chaosLocker(t, slow, "slow")
	l, err := lk.TryAcquire(ctx, "job/slow")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	samples := watchServer(ctx, direct, leasehold.LockKey(lk.Namespace(), "job/slow"), stop)
	p.SetDelay(chaosTTL * 6 / 10)
	select {
	case <-l.Done():
	case <-time.After(20 * chaosTTL):
		close(stop)
		t.Fatalf("holder's context alive after %v of delayed renew replies", 20*chaosTTL)
	}
	doneAt := time.Now()
	close(stop)
	var last serverSample
	for s := range samples {
		if s.at.After(doneAt) {
			continue
		}
		if s.remaining <= 0 {
			if !s.recv.Before(doneAt) {
				continue // read by the server at some time up to recv, maybe after doneAt
			}
			t.Fatalf("server had no live lease at %v (reply by %v), before the holder's context ended at %v", s.at, s.recv, doneAt)
		}
		last = s
	}
	if last.at.IsZero() || !last.at.Add(last.remaining).After(doneAt) {
		t.Fatalf("no server sample proves the lease live when the holder gave up (last %+v)", last)
	}
	t.Logf("holder gave up ≥ %v before the server's expiry (cause: %v)", last.at.Add(last.remaining).Sub(doneAt), context.Cause(l.Context()))
	p.SetDelay(0)
	next, err := chaosLocker(t, direct, "next").Acquire(ctx, "job/slow")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Token() <= l.Token() {
		t.Fatalf("next token %d not greater than %d", next.Token(), l.Token())
	}
}

// TestChaosConnectionCut: the holder's connections are cut (closed, and new
// ones refused; or, separately, black-holed). Its context must end no later
// than its deadline (at most a TTL after the cut), and the next holder's
// token is greater.
func TestChaosConnectionCut(t *testing.T) {
	for _, mode := range []string{"close", "blackhole"} {
		t.Run(mode, func(t *testing.T) {
			p, slow, direct := chaosPair(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			l, err := chaosLocker(t, slow, "cut").TryAcquire(ctx, "job/cut")
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(chaosTTL / 2) // a renewal or two on the proxied pool
			cut := time.Now()
			switch mode {
			case "close":
				p.SetRefuse(true)
				p.CloseConns()
			case "blackhole":
				p.SetDrop(true)
			}
			// Let the holder's pool close at once instead of waiting on
			// black-holed connections (runs before its Close).
			t.Cleanup(p.CloseConns)
			time.Sleep(10 * time.Millisecond) // a reply read before the cut may still extend it
			deadline := l.Deadline()
			select {
			case <-l.Done():
			case <-time.After(3 * chaosTTL):
				t.Fatalf("holder's context alive %v after the cut", 3*chaosTTL)
			}
			doneAt := time.Now()
			const slack = 100 * time.Millisecond // timer and scheduling
			if doneAt.After(deadline.Add(slack)) {
				t.Errorf("holder's context ended %v after its deadline", doneAt.Sub(deadline))
			}
			if doneAt.Sub(cut) > chaosTTL+slack {
				t.Errorf("holder's context ended %v after the cut, want ≤ TTL %v", doneAt.Sub(cut), chaosTTL)
			}
			t.Logf("context ended %v after the cut, %v after its deadline (cause: %v)",
				doneAt.Sub(cut).Round(time.Millisecond), doneAt.Sub(deadline).Round(time.Millisecond), context.Cause(l.Context()))
			next, err := chaosLocker(t, direct, "next").Acquire(ctx, "job/cut")
			if err != nil {
				t.Fatal(err)
			}
			defer next.Release(ctx)
			if next.Token() <= l.Token() {
				t.Fatalf("next token %d not greater than %d", next.Token(), l.Token())
			}
		})
	}
}
