// Package faultkit holds the process-level fault scenarios every backend
// that processes can share runs: kill -9 a holder process, SIGSTOP it past
// its TTL, delay or cut its connection with the chaos proxy
// (internal/chaos), and claim one occurrence from several processes.
// conformance.Run runs them from the Kit its Harness.Process returns (see
// there); a backend's test package only adds the helper process, whose Kit
// needs the test's Open (and Fenced, when the test's kit has it):
//
//	// TestFaultHelper is the helper process of the fault kit.
//	func TestFaultHelper(t *testing.T) { faultkit.Helper(t, faultkit.Kit{Open: openAt}) }
//
// The helper process is the test binary re-executed with -test.run
// selecting Kit.HelperTest and the environment variable HelperEnv set. It
// opens the backend through the same Kit.Open as the test, then obeys line
// commands on stdin and answers on stdout (see Helper).
package faultkit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/internal/childproc"
)

// HelperEnv is the environment variable that makes the re-executed test
// binary a helper process; its value is "<addr> <ns>" (addr may be empty).
const HelperEnv = "LEASEHOLD_FAULTKIT_HELPER"

// Kit describes the backend under test.
type Kit struct {
	// Open returns a backend on the server at addr in the namespace ns (key
	// prefix, schema, file...: whatever isolates one test), closed at the
	// end of t. It is called in the test and, with the same addr and ns, in
	// the helper process; with chaos proxies' addresses for the proxied
	// holder.
	Open func(t testing.TB, addr, ns string) backend.Leases
	// Addr is the server's address ("host:port"); for a backend on several
	// servers (Redlock's nodes) their addresses joined by commas, each of
	// which the proxied holder reaches through a proxy of its own; empty
	// for a backend with no server (SQLite: a file that NS names), which
	// rules out the scenarios that need a connection to delay or cut.
	// NS is the test's namespace. The helper process reads both from its
	// environment instead.
	Addr, NS string
	// TTL is the lock TTL of the holder under test (the helper process's,
	// the proxied one's). The test sends it to the helper with each hold.
	TTL time.Duration
	// NextTTL is the lock TTL of the holders that take over in the test
	// process (TTL when zero).
	NextTTL time.Duration
	// ExpiryBound, when positive, bounds how long after kill -9 the next
	// holder may have to wait (KillHolder asserts it).
	ExpiryBound time.Duration
	// Fenced, when set, writes value to a sink guarded by the fencing token
	// of key (a backend key, leasehold.LockKey). It must succeed for the
	// holder and fail with backend.ErrLeaseLost for a stale token. The
	// helper writes through it before each act and once after it lost
	// its lease; ConnectionCut writes through it around the cut.
	Fenced func(ctx context.Context, b backend.Leases, key string, token uint64, value string) error
	// Sink, when set, returns the values Fenced wrote so far, in order;
	// ConnectionCut asserts a rejected write left nothing.
	Sink func(ctx context.Context, b backend.Leases) ([]string, error)
	// HelperTest is the name of the test that calls Helper
	// ("TestFaultHelper" when empty).
	HelperTest string
	// NoWire, when set, says why no proxy can stand between this backend
	// and its servers although it has some (a Redis Cluster or Sentinel
	// client learns the nodes' addresses from the servers and dials them
	// directly): the scenarios that delay or cut the holder's connection
	// are skipped with it.
	NoWire string
}

// InHelper reports whether this process is a helper process (so an Open
// func can choose, say, a shorter session for the holder it will be).
func InHelper() bool { return os.Getenv(HelperEnv) != "" }

// Locker returns a Locker on b for instance name with the kit's TTL and a
// short retry backoff (5 ms..100 ms).
func (k Kit) Locker(t testing.TB, b backend.Leases, name string) *leasehold.Locker {
	t.Helper()
	return k.locker(t, b, name, k.TTL)
}

// nextLocker is Locker with NextTTL, for the holders that take over.
func (k Kit) nextLocker(t testing.TB, b backend.Leases, name string) *leasehold.Locker {
	t.Helper()
	if k.NextTTL > 0 {
		return k.locker(t, b, name, k.NextTTL)
	}
	return k.locker(t, b, name, k.TTL)
}

func (k Kit) locker(t testing.TB, b backend.Leases, name string, ttl time.Duration) *leasehold.Locker {
	t.Helper()
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance(name), leasehold.WithTTL(ttl),
		leasehold.WithBackoff(5*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return lk
}

func (k Kit) open(t testing.TB) backend.Leases {
	t.Helper()
	if k.Open == nil || k.TTL <= 0 {
		t.Fatalf("faultkit: Kit needs Open and a positive TTL (got TTL %v)", k.TTL)
	}
	return k.Open(t, k.Addr, k.NS)
}

// Wire reports whether the backend is reached over the network (Addr is
// set) through addresses a proxy can stand in for (NoWire is empty), so
// that a proxy can delay or cut its connections.
func (k Kit) Wire() bool { return k.Addr != "" && k.NoWire == "" }

// ctx returns a context bounding one scenario.
func ctx(t testing.TB, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

// Helper is the helper process's main: the backend's TestFaultHelper calls
// it. Outside a helper process it skips. It opens k's backend at the addr
// and ns from HelperEnv and obeys these commands, one a line on stdin:
//
//	hold <key> <ttl>: acquire key (instance "child", that TTL) and print
//	  "acquired <token>"; then every 20 ms take the time, and while it is
//	  before the lock's deadline write through k.Fenced (when set) and print
//	  "act <token> <unix ns of that time>". Once the deadline has passed
//	  (or the lock's context ended) wait for the context to end, renew and
//	  release the stale grant directly on the backend (retrying other errors
//	  for 20 s: a client may be reconnecting), write through k.Fenced once
//	  more, print "stale renew=<lost|error(..)> release=<..> fence=<rejected|
//	  none|accepted(..)>" and exit.
//	claim <job> <unix ms> <n>: claim that occurrence from n goroutines at
//	  once; print "win <instance>", "lost" (ErrClaimed) or "error <err>" per
//	  claim, then "claimed". A backend without a ledger fails it.
//
// Failures print "error <why>" and exit 2.
func Helper(t *testing.T, k Kit) {
	spec := os.Getenv(HelperEnv)
	if spec == "" {
		t.Skip("helper process for the fault tests")
	}
	addr, ns, _ := strings.Cut(spec, " ")
	b := k.Open(t, addr, ns)
	out := &lineWriter{w: os.Stdout}
	fail := func(f string, a ...any) {
		out.println("error " + strings.ReplaceAll(fmt.Sprintf(f, a...), "\n", " "))
		os.Exit(2)
	}
	holding := false
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 3 && f[0] == "hold":
			ttl, err := time.ParseDuration(f[2])
			if err != nil {
				fail("bad hold command %q", in.Text())
			}
			holding = true
			go hold(t, k, b, f[1], ttl, out, fail)
		case len(f) == 4 && f[0] == "claim":
			at, err1 := strconv.ParseInt(f[2], 10, 64)
			n, err2 := strconv.Atoi(f[3])
			if err1 != nil || err2 != nil {
				fail("bad claim command %q", in.Text())
			}
			full, err := backend.LedgerOf(b)
			if err != nil {
				fail("claim: %v", err)
			}
			claim(full, f[1], time.UnixMilli(at), n, out)
		default:
			fail("unknown command %q", in.Text())
		}
	}
	// stdin closed: the test is over (or is about to kill us). A holder
	// goes on until it loses its lease and exits.
	if !holding {
		os.Exit(0)
	}
	select {}
}

type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) println(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintln(l.w, s)
}

func hold(t *testing.T, k Kit, b backend.Leases, key string, ttl time.Duration, out *lineWriter, fail func(string, ...any)) {
	ctx := context.Background()
	l, err := k.locker(t, b, "child", ttl).Acquire(ctx, key)
	if err != nil {
		fail("acquire %s: %v", key, err)
	}
	bkey := leasehold.LockKey("default", key)
	mine, err := b.Get(ctx, bkey) // the grant's owner nonce, for the stale calls
	if err != nil || mine.Token != uint64(l.Token()) {
		fail("reading own grant: %+v, %v", mine, err)
	}
	out.println(fmt.Sprintf("acquired %d", l.Token()))
	tick := time.NewTicker(20 * time.Millisecond)
	for {
		select {
		case <-l.Done():
		case <-tick.C:
		}
		// The time is taken before the check, so an "act" line names a
		// moment at which the deadline had not passed.
		now := time.Now()
		if l.Context().Err() != nil || !now.Before(l.Deadline()) {
			break
		}
		if k.Fenced != nil {
			err := k.Fenced(ctx, b, bkey, mine.Token, "child")
			if err != nil && !time.Now().Before(l.Deadline()) {
				// Stopped between the check and the write, or inside it,
				// until past the deadline: the fence refused the stale
				// write (or the server ended the stalled transaction), as
				// it must. No act: the write did not happen.
				break
			}
			if err != nil {
				// The fence said no while the deadline had not passed: the
				// holder was told it held a lease the server did not.
				fail("fenced write before the deadline: %v", err)
			}
		}
		out.println(fmt.Sprintf("act %d %d", l.Token(), now.UnixNano()))
	}
	<-l.Done() // the local deadline cancels it, if nothing else did first
	lost := func(call func() error) string {
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := call()
			if errors.Is(err, backend.ErrLeaseLost) {
				return "lost"
			}
			if err == nil || time.Now().After(deadline) {
				return fmt.Sprintf("error(%v)", err)
			}
			time.Sleep(50 * time.Millisecond) // the client is reconnecting
		}
	}
	renew := lost(func() error {
		_, err := b.Renew(ctx, backend.RenewRequest{Key: bkey, Owner: mine.Owner, Token: mine.Token, TTL: ttl})
		return err
	})
	release := lost(func() error { return b.Release(ctx, bkey, mine.Owner, mine.Token) })
	fence := "none"
	if k.Fenced != nil {
		if err := k.Fenced(ctx, b, bkey, mine.Token, "child-late"); errors.Is(err, backend.ErrLeaseLost) {
			fence = "rejected"
		} else {
			fence = fmt.Sprintf("accepted(%v)", err)
		}
	}
	out.println(fmt.Sprintf("stale renew=%s release=%s fence=%s", renew, release, fence))
	os.Exit(0)
}

func claim(b backend.Backend, job string, at time.Time, n int, out *lineWriter) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := backend.Owner{Instance: fmt.Sprintf("p%d-g%d", os.Getpid(), i), Nonce: backend.NewNonce()}
			_, err := b.Claim(ctx, backend.ClaimRequest{Job: job, ScheduledAt: at, SpecVersion: "v1", Owner: o, TTL: time.Minute})
			switch {
			case err == nil:
				out.println("win " + o.Instance)
			case errors.Is(err, backend.ErrOccurrenceClaimed):
				out.println("lost")
			default:
				out.println("error " + strings.ReplaceAll(err.Error(), "\n", " "))
			}
		}()
	}
	wg.Wait()
	out.println("claimed")
}

// Proc is a running helper process.
type Proc struct {
	test  string // the helper test it runs
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

// Start re-executes the test binary as a helper process for k (which
// obeys nothing until sent a command). It is killed at the end of t.
func Start(t testing.TB, k Kit) *Proc {
	t.Helper()
	name := k.HelperTest
	if name == "" {
		name = "TestFaultHelper"
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v=false", "-test.count=1")
	cmd.Env = append(os.Environ(), HelperEnv+"="+k.Addr+" "+k.NS)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{test: name, cmd: cmd, in: in, lines: make(chan string, 4096)}
	t.Cleanup(func() {
		_ = childproc.Signal(cmd.Process, childproc.SigCont)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	return p
}

// Send writes one command line to the helper.
func (p *Proc) Send(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		t.Fatalf("sending %q to the helper: %v", line, err)
	}
}

// NextLine returns the helper's next line, failing t when none comes
// within the given time, when the helper exited, or when the line is an
// "error ..." report.
func (p *Proc) NextLine(t testing.TB, within time.Duration) string {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatalf("helper process exited without a word (has the test package a %s calling faultkit.Helper? see package faultkit)", p.test)
		}
		if strings.HasPrefix(l, "error") {
			t.Fatalf("helper: %s", l)
		}
		return l
	case <-timer.C:
		t.Fatalf("helper said nothing within %v", within)
	}
	return ""
}

// Drain discards the lines the helper has printed so far.
func (p *Proc) Drain() {
	for len(p.lines) > 0 {
		<-p.lines
	}
}

// Signal sends sig to the helper.
func (p *Proc) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := childproc.Signal(p.cmd.Process, sig); err != nil {
		t.Fatalf("signal %v to the helper: %v", sig, err)
	}
}

// Holder is a helper process holding a lock.
type Holder struct {
	*Proc
	Key   string
	Token leasehold.Token
}

// StartHolder starts a helper process that acquires key and acts on it
// (see Helper, "hold"); it returns once the helper has the lock.
func StartHolder(t testing.TB, k Kit, key string) *Holder {
	t.Helper()
	p := Start(t, k)
	p.Send(t, "hold "+key+" "+k.TTL.String())
	l := p.NextLine(t, 30*time.Second)
	tok, ok := strings.CutPrefix(l, "acquired ")
	n, err := strconv.ParseUint(tok, 10, 64)
	if !ok || err != nil {
		t.Fatalf("holder said %q, want acquired <token>", l)
	}
	return &Holder{Proc: p, Key: key, Token: leasehold.Token(n)}
}

// nextAct returns the time of the holder's next act, failing t on any
// other line.
func (h *Holder) nextAct(t testing.TB, within time.Duration) time.Time {
	t.Helper()
	l := h.NextLine(t, within)
	at, ok := parseAct(l, h.Token)
	if !ok {
		t.Fatalf("holder said %q, want act %d <ns>", l, h.Token)
	}
	return at
}

func parseAct(l string, token leasehold.Token) (time.Time, bool) {
	f := strings.Fields(l)
	if len(f) != 3 || f[0] != "act" || f[1] != strconv.FormatUint(uint64(token), 10) {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}
