package faultkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/internal/childproc"
)

// checkHolderSeen asserts the server shows the helper's grant on key.
func checkHolderSeen(t testing.TB, ctx context.Context, b backend.Leases, h *Holder) {
	t.Helper()
	got, err := b.Get(ctx, leasehold.LockKey("default", h.Key))
	if err != nil || got.Token != uint64(h.Token) || got.Owner.Instance != "child" {
		t.Fatalf("Get = %+v, %v; want the helper (child) with token %d", got, err, h.Token)
	}
}

// takeOver starts a holder of key in a helper process, waits for it to act
// and checks the server shows its grant, sends it sig, and acquires key
// in this process (waiting for the server to expire the holder's lease).
// It fails t unless the new token is greater; it returns the new lock and
// how long after sig it came.
func takeOver(t *testing.T, ctx context.Context, k Kit, b backend.Leases, key string, sig os.Signal) (*Holder, *leasehold.Lock, time.Duration) {
	t.Helper()
	h := StartHolder(t, k, key)
	h.nextAct(t, 10*time.Second)
	checkHolderSeen(t, ctx, b, h)
	h.Signal(t, sig)
	sent := time.Now()
	l, err := k.nextLocker(t, b, "next").Acquire(ctx, key)
	if err != nil {
		t.Fatalf("Acquire after %v to the holder: %v", sig, err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	waited := time.Since(sent)
	if l.Token() <= h.Token {
		t.Fatalf("token %d after %v to the holder not greater than the holder's %d", l.Token(), sig, h.Token)
	}
	t.Logf("%v → next holder in %v (TTL %v), token %d → %d", sig, waited.Round(time.Millisecond), k.TTL, h.Token, l.Token())
	return h, l, waited
}

// KillHolder: kill -9 the process holding a lock while it acts; the next
// holder gets the lock once the server expired the dead holder's lease
// (within k.ExpiryBound when set), with a greater token.
func KillHolder(t *testing.T, k Kit) {
	b := k.open(t)
	_, _, waited := takeOver(t, ctx(t, 60*time.Second), k, b, "job/kill", os.Kill)
	if k.ExpiryBound > 0 && waited > k.ExpiryBound {
		t.Errorf("next holder waited %v after kill -9, want ≤ %v (TTL %v)", waited, k.ExpiryBound, k.TTL)
	}
}

// PausedHolder: SIGSTOP the holder past its TTL; meanwhile the next holder
// acquires with a greater token. After SIGCONT the woken holder acts no
// more (every act it prints was decided before the resume), its stale
// renew and release are refused with ErrLeaseLost, its fenced write (when
// k.Fenced is set) is rejected, and the next holder's grant is untouched.
func PausedHolder(t *testing.T, k Kit) {
	b := k.open(t)
	ctx := ctx(t, 90*time.Second)
	h, l, _ := takeOver(t, ctx, k, b, "job/pause", childproc.SigStop)
	resumed := time.Now()
	h.Signal(t, childproc.SigCont)
	want := "stale renew=lost release=lost fence=none"
	if k.Fenced != nil {
		want = "stale renew=lost release=lost fence=rejected"
	}
	for {
		line := h.NextLine(t, 40*time.Second)
		if at, ok := parseAct(line, h.Token); ok {
			if !at.Before(resumed) {
				t.Fatalf("after SIGCONT the stale holder acted at %v, after the resume at %v (it must see its deadline passed first)", at, resumed)
			}
			continue // decided before the stop, still in the pipe
		}
		if line != want {
			t.Fatalf("resumed holder said %q, want %q", line, want)
		}
		break
	}
	got, err := b.Get(ctx, leasehold.LockKey("default", "job/pause"))
	if err != nil || got.Token != uint64(l.Token()) {
		t.Fatalf("after the stale holder's calls Get = %+v, %v; want the next holder's token %d", got, err, l.Token())
	}
}

// serverSample: the server read the lease between local times at (the
// request's send) and recv (its reply) and said it had remaining left
// (≤ 0: not held). So the server holds the lease until at least
// at+remaining; "not held" is known to predate recv only.
type serverSample struct {
	at, recv  time.Time
	remaining time.Duration
}

// watchServer samples the lease of bkey through b.Get every 5 ms until
// stop is closed, then closes the returned channel.
func watchServer(ctx context.Context, b backend.Leases, bkey string, stop <-chan struct{}) <-chan serverSample {
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
			l, err := b.Get(ctx, bkey)
			switch {
			case err == nil:
				out <- serverSample{at: at, recv: time.Now(), remaining: l.Remaining}
			case errors.Is(err, backend.ErrNotFound):
				out <- serverSample{at: at, recv: time.Now(), remaining: -1}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return out
}

// proxies stand one in front of each of the kit's servers; a fault is set
// on all of them at once.
type proxies []*chaos.Proxy

func (ps proxies) setDelay(d time.Duration) {
	for _, p := range ps {
		p.SetDelay(d)
	}
}

func (ps proxies) setDrop(on bool) {
	for _, p := range ps {
		p.SetDrop(on)
	}
}

// cut refuses new connections and closes the open ones.
func (ps proxies) cut() {
	for _, p := range ps {
		p.SetRefuse(true)
		p.CloseConns()
	}
}

// viaProxy returns chaos proxies in front of k's servers and a backend
// (same namespace) through them; the backend is closed before the proxies.
func viaProxy(t *testing.T, k Kit) (proxies, backend.Leases) {
	t.Helper()
	if !k.Wire() {
		t.Fatalf("faultkit: the kit has no server address to put a proxy in front of")
	}
	var ps proxies
	var addrs []string
	for _, a := range strings.Split(k.Addr, ",") {
		p, err := chaos.New(a)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		ps = append(ps, p)
		addrs = append(addrs, p.Addr())
	}
	return ps, k.Open(t, strings.Join(addrs, ","), k.NS)
}

// DelayedRenewReplies: the holder's connection runs through a proxy that
// delays every reply by 0.6×TTL, so renewals are applied at once but
// confirmed late. The holder's context must end at its send-time deadline
// while the server still holds the lease (sampled through Get on a direct
// connection: its Remaining must be the server's), and the next holder
// gets a greater token.
func DelayedRenewReplies(t *testing.T, k Kit) {
	direct := k.open(t)
	p, slow := viaProxy(t, k)
	ctx := ctx(t, 60*time.Second)
	// The holder releases its lease, best effort, as soon as its deadline
	// passes; hold that release until the check below has read the server,
	// or a read after the end could find the key freed by its own holder
	// rather than expired.
	checked := make(chan struct{})
	l, err := k.Locker(t, heldRelease{Leases: slow, until: checked}, "slow").TryAcquire(ctx, "job/slow")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	samples := watchServer(ctx, direct, leasehold.LockKey("default", "job/slow"), stop)
	p.setDelay(k.TTL * 6 / 10)
	select {
	case <-l.Done():
	case <-time.After(20 * k.TTL):
		close(stop)
		t.Fatalf("holder's context alive after %v of delayed renew replies", 20*k.TTL)
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
	if !last.at.IsZero() && last.at.Add(last.remaining).After(doneAt) {
		t.Logf("holder gave up ≥ %v before the server's expiry (cause: %v)", last.at.Add(last.remaining).Sub(doneAt), context.Cause(l.Context()))
	} else {
		// No sample before the end proves it (a server that stalls, say
		// on fsync, answers none for a while). A read after the end that
		// finds the holder's grant live does: a grant, once expired or
		// released, is never live again under its token.
		at := time.Now()
		got, err := direct.Get(ctx, leasehold.LockKey("default", "job/slow"))
		if err != nil || got.Token != uint64(l.Token()) || got.Remaining <= 0 {
			t.Fatalf("no server sample proves the lease live when the holder gave up at %v (last before it %+v; read after it at %v: %+v, %v)", doneAt, last, at, got, err)
		}
		t.Logf("holder gave up before the server's expiry: its grant was live when read %v after (cause: %v)", at.Sub(doneAt), context.Cause(l.Context()))
	}
	close(checked)
	p.setDelay(0)
	next, err := k.nextLocker(t, direct, "next").Acquire(ctx, "job/slow")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Token() <= l.Token() {
		t.Fatalf("next token %d not greater than %d", next.Token(), l.Token())
	}
}

// heldRelease is Leases whose Release waits until until is closed (or its
// context ends, and then it is not sent).
type heldRelease struct {
	backend.Leases
	until <-chan struct{}
}

func (h heldRelease) Release(ctx context.Context, key string, owner backend.Owner, token uint64) error {
	select {
	case <-h.until:
		return h.Leases.Release(ctx, key, owner, token)
	case <-ctx.Done():
		return fmt.Errorf("release held by the test: %w: %w", backend.ErrNotApplied, ctx.Err())
	}
}

// ConnectionCut: the holder's connections are cut (closed and new ones
// refused; or, separately, black-holed). Its context must end no later
// than its deadline (at most a TTL after the cut); the next holder's token
// is greater. With k.Fenced, a fenced write with the stale token is
// rejected while the new holder's goes through (and with k.Sink, the sink
// holds exactly the holder's write before the cut and the new holder's).
func ConnectionCut(t *testing.T, k Kit) {
	for _, mode := range []string{"close", "blackhole"} {
		t.Run(mode, func(t *testing.T) {
			direct := k.open(t)
			p, slow := viaProxy(t, k)
			ctx := ctx(t, 60*time.Second)
			l, err := k.Locker(t, slow, "cut").TryAcquire(ctx, "job/cut-"+mode)
			if err != nil {
				t.Fatal(err)
			}
			bkey := leasehold.LockKey("default", "job/cut-"+mode)
			if k.Fenced != nil {
				if err := k.Fenced(ctx, direct, bkey, uint64(l.Token()), "before "+mode); err != nil {
					t.Fatalf("fenced write by the holder before the cut: %v", err)
				}
			}
			// A renewal or two on the proxied connection: wait until the
			// deadline moved (a condition, not a guess).
			first := l.Deadline()
			Retry(t, 2*k.TTL, "a renewal through the proxy", func() error {
				if !l.Deadline().After(first) {
					return errors.New("deadline not moved")
				}
				return nil
			})
			cut := time.Now()
			switch mode {
			case "close":
				p.cut()
			case "blackhole":
				p.setDrop(true)
			}
			// Let the holder's client close at once instead of waiting on
			// black-holed connections, old or dialled since (runs before
			// its Close).
			t.Cleanup(p.cut)
			time.Sleep(10 * time.Millisecond) // a reply read before the cut may still extend it
			deadline := l.Deadline()
			select {
			case <-l.Done():
			case <-time.After(3 * k.TTL):
				t.Fatalf("holder's context alive %v after the cut", 3*k.TTL)
			}
			doneAt := time.Now()
			const slack = 100 * time.Millisecond // timer and scheduling
			if doneAt.After(deadline.Add(slack)) {
				t.Errorf("holder's context ended %v after its deadline", doneAt.Sub(deadline))
			}
			if doneAt.Sub(cut) > k.TTL+slack {
				t.Errorf("holder's context ended %v after the cut, want ≤ TTL %v", doneAt.Sub(cut), k.TTL)
			}
			t.Logf("context ended %v after the cut, %v after its deadline (cause: %v)",
				doneAt.Sub(cut).Round(time.Millisecond), doneAt.Sub(deadline).Round(time.Millisecond), context.Cause(l.Context()))
			next, err := k.nextLocker(t, direct, "next").Acquire(ctx, "job/cut-"+mode)
			if err != nil {
				t.Fatal(err)
			}
			defer next.Release(ctx)
			if next.Token() <= l.Token() {
				t.Fatalf("next token %d not greater than %d", next.Token(), l.Token())
			}
			if k.Fenced == nil {
				return
			}
			if err := k.Fenced(ctx, direct, bkey, uint64(l.Token()), "stale "+mode); !errors.Is(err, backend.ErrLeaseLost) {
				t.Fatalf("fenced write with the stale token %d: %v, want ErrLeaseLost", l.Token(), err)
			}
			if err := k.Fenced(ctx, direct, bkey, uint64(next.Token()), "next "+mode); err != nil {
				t.Fatalf("fenced write by the new holder: %v", err)
			}
			if k.Sink != nil {
				all, err := k.Sink(ctx, direct)
				var got []string
				for _, v := range all {
					if strings.HasSuffix(v, " "+mode) {
						got = append(got, v)
					}
				}
				if want := "before " + mode + ",next " + mode; err != nil || strings.Join(got, ",") != want {
					t.Fatalf("sink holds %q of this cut (%v), want the holder's write before the cut and the new holder's: %s", got, err, want)
				}
			}
		})
	}
}

// ClaimAcrossProcesses: procs helper processes × per goroutines claim one
// occurrence at once; exactly one wins, every other is told ErrClaimed, and
// the ledger names the winner. The backend must keep a run ledger.
func ClaimAcrossProcesses(t *testing.T, k Kit, procs, per int) {
	b, err := backend.LedgerOf(k.open(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctx(t, 2*time.Minute)
	at := backend.Instant(time.Now().Add(-time.Second))
	var ps []*Proc
	for range procs {
		ps = append(ps, Start(t, k))
	}
	cmd := "claim job " + strconv.FormatInt(at.UnixMilli(), 10) + " " + strconv.Itoa(per)
	for _, p := range ps {
		p.Send(t, cmd)
	}
	var winners []string
	lost := 0
	for _, p := range ps {
		for range per {
			l := p.NextLine(t, 60*time.Second)
			switch {
			case strings.HasPrefix(l, "win "):
				winners = append(winners, strings.TrimPrefix(l, "win "))
			case l == "lost":
				lost++
			default:
				t.Fatalf("helper said %q", l)
			}
		}
		if l := p.NextLine(t, 10*time.Second); l != "claimed" {
			t.Fatalf("helper said %q, want claimed", l)
		}
		_ = p.in.Close()
	}
	if n := procs * per; len(winners) != 1 || lost != n-1 {
		t.Fatalf("%d winners %v and %d losers among %d claims, want 1 and %d", len(winners), winners, lost, n, n-1)
	}
	r, err := b.GetRun(ctx, "job", at)
	if err != nil || r.Owner.Instance != winners[0] {
		t.Fatalf("GetRun = %+v, %v; want the winner %s", r, err, winners[0])
	}
}

// Retry runs fn until it succeeds or within passes (then fails t), for
// calls made while a client reconnects after a server restart.
func Retry(t testing.TB, within time.Duration, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
