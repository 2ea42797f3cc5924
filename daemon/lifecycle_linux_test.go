package daemon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// deadPid returns the pid of a process that has exited (and was reaped).
func deadPid(t *testing.T) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

func TestProvablyGone(t *testing.T) {
	self, ok := selfProc()
	if !ok {
		t.Fatal("selfProc: not known on Linux")
	}
	parent := os.Getppid()
	pstart, _, err := procStat(parent)
	if err != nil {
		t.Fatal(err)
	}
	with := func(f func(p *proc)) string { p := self; f(&p); return ownerName("d1", p, true) }
	for _, c := range []struct {
		name  string
		owner string
		gone  bool
	}{
		{"a pid that exited", with(func(p *proc) { p.pid = deadPid(t) }), true},
		{"a reused pid (alive, another start time)", with(func(p *proc) { p.pid, p.start = parent, pstart+1 }), true},
		{"a live process", with(func(p *proc) { p.pid, p.start = parent, pstart }), false},
		{"another host", with(func(p *proc) { p.pid, p.host = deadPid(t), "elsewhere" }), false},
		{"another boot", with(func(p *proc) { p.pid, p.boot = deadPid(t), "0123456789abcdef0123456789abcdef" }), false},
		{"another pid namespace", with(func(p *proc) { p.pid, p.pidns = deadPid(t), p.pidns+1 }), false},
		{"no process named", "d1", false},
		{"this process", with(func(*proc) {}), false},
	} {
		if gone, why := provablyGone(c.owner); gone != c.gone {
			t.Errorf("%s (%s): gone = %v (%s), want %v", c.name, c.owner, gone, why, c.gone)
		}
	}
	if p, ok := parseOwner(ownerName("a/b", proc{host: "h:x", pid: 7, start: 9, pidns: 11, boot: "bb"}, true)); !ok || p != (proc{host: "h:x", pid: 7, start: 9, pidns: 11, boot: "bb"}) {
		t.Fatalf("parseOwner round trip: %+v %v", p, ok)
	}
}

// holdAs takes the instance lease of d1 in namespace life as owner name,
// the way a daemon that then died would have left it.
func holdAs(t *testing.T, db, owner string) leasehold.Token {
	t.Helper()
	b, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	lk, err := leasehold.NewLocker(b, leasehold.WithInstance(owner), leasehold.WithNamespace("life"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := lk.TryAcquire(context.Background(), instanceKey("d1"))
	if err != nil {
		t.Fatal(err)
	}
	return l.Token() // never released: its renewals stop when the test's backend closes
}

// A lease left by a dead process of this host and boot is taken over at
// once, with a greater token; one left by another host is waited for,
// with the reason logged, and nothing runs meanwhile.
func TestInstanceTakeover(t *testing.T) {
	self, _ := selfProc()
	t.Run("dead pid on this boot", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "d.db")
		dead := self
		dead.pid = deadPid(t)
		old := holdAs(t, db, ownerName("d1", dead, true))
		var log testkit.Buffer
		_, done := startWith(t, lifeYAML, db, &log)
		running := "msg=\"leasehold daemon running\" instance=d1 namespace=life"
		// 10 s: well within the 15 s TTL the dead holder's lease has left.
		if !eventually.Within(10*time.Second, func() bool {
			select {
			case err := <-done:
				t.Fatalf("Run returned %v\n%s", err, log.String())
			default:
			}
			return strings.Contains(log.String(), running)
		}) {
			t.Fatalf("not running: the dead holder was not taken over\n%s", log.String())
		}
		s := log.String()
		if !strings.Contains(s, "taking the instance id over") || !regexp.MustCompile(running+`.* token=`+fmt.Sprint(old+1)+`\b`).MatchString(s) {
			t.Fatalf("no takeover with a greater token than %d in the log:\n%s", old, s)
		}
	})
	t.Run("another host", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "d.db")
		other := self
		other.host = "elsewhere"
		holdAs(t, db, ownerName("d1", other, true))
		var log testkit.Buffer
		d, done := startWith(t, lifeYAML, db, &log)
		if !eventually.Within(10*time.Second, func() bool { return strings.Contains(log.String(), "instance id already running") }) {
			t.Fatalf("no waiting message:\n%s", log.String())
		}
		if s := log.String(); !strings.Contains(s, `runs on host \"elsewhere\", not here`) {
			t.Fatalf("the waiting message does not say why:\n%s", s)
		}
		select {
		case <-d.Ready():
			t.Fatal("running while another host holds the instance id")
		case err := <-done:
			t.Fatalf("Run returned %v instead of waiting", err)
		default:
		}
	})
}
