package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend/sqlite"
)

const lifeYAML = `
instance: d1
namespace: life
http: {listen: "off"}
jobs:
  - name: a
    schedule: "@every 1h"
    command: {argv: ["true"]}
  - name: b
    schedule: "@every 1h"
    command: {argv: ["true"]}
`

func parseYAML(t *testing.T, dir, yml string) *Config {
	t.Helper()
	cfg, err := Parse(filepath.Join(dir, "leasehold.yaml"), []byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func jobNames(d *Daemon) string {
	var names []string
	for n := range d.Scheduler().Jobs() {
		names = append(names, n)
	}
	sortStrings(names)
	return strings.Join(names, ",")
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// Reload refuses a config that changes what a running daemon cannot
// apply, naming each field and value, and changes nothing; a config with
// only job changes is applied.
func TestReloadRefusesFixedChangesAndChangesNothing(t *testing.T) {
	d := runDaemon(t, lifeYAML)
	dir := filepath.Dir(d.cfg.path) // the same default backend
	bad := parseYAML(t, dir, strings.Replace(strings.Replace(lifeYAML, "namespace: life", "namespace: other\ngrace: 3s", 1),
		"name: b", "name: c", 1))
	err := d.Reload(bad)
	if !errors.Is(err, ErrNotReloaded) {
		t.Fatalf("Reload = %v, want ErrNotReloaded", err)
	}
	for _, want := range []string{`namespace "life" → "other"`, `grace "30s" → "3s"`} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("Reload error lacks %q: %v", want, err)
		}
	}
	if got := jobNames(d); got != "a,b" {
		t.Fatalf("after a refused reload the jobs are %s, want a,b", got)
	}
	good := parseYAML(t, dir, strings.Replace(lifeYAML, "name: b", "name: c", 1))
	if err := d.Reload(good); err != nil {
		t.Fatal(err)
	}
	if got := jobNames(d); got != "a,c" {
		t.Fatalf("after the reload the jobs are %s, want a,c", got)
	}
}

// syncLog is a log that tests read while the daemon writes.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *syncLog) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

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
	if runtime.GOOS != "linux" {
		t.Skip("a holder is provably gone only on Linux (boot id and /proc)")
	}
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

// startWith runs a daemon of yml on the SQLite file db, logging into log.
func startWith(t *testing.T, yml, db string, log *syncLog) (*Daemon, chan error) {
	t.Helper()
	b, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(parseYAML(t, t.TempDir(), yml), b, slog.New(slog.NewTextHandler(log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; b.Close() })
	return d, done
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
	if runtime.GOOS != "linux" {
		t.Skip("takeover needs Linux (boot id and /proc)")
	}
	self, _ := selfProc()
	t.Run("dead pid on this boot", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "d.db")
		dead := self
		dead.pid = deadPid(t)
		old := holdAs(t, db, ownerName("d1", dead, true))
		var log syncLog
		_, done := startWith(t, lifeYAML, db, &log)
		running := "msg=\"leasehold daemon running\" instance=d1 namespace=life"
		deadline := time.Now().Add(10 * time.Second) // well within the 15 s TTL the dead holder's lease has left
		for !strings.Contains(log.String(), running) {
			select {
			case err := <-done:
				t.Fatalf("Run returned %v\n%s", err, log.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("not running: the dead holder was not taken over\n%s", log.String())
			}
			time.Sleep(5 * time.Millisecond)
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
		var log syncLog
		d, done := startWith(t, lifeYAML, db, &log)
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(log.String(), "instance id already running") {
			if time.Now().After(deadline) {
				t.Fatalf("no waiting message:\n%s", log.String())
			}
			time.Sleep(5 * time.Millisecond)
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

// A job added by Reload has its secrets masked in the log like the jobs of
// the first config. (Its errors are scrubbed by its own scrubber; the
// daemon's logger also learns the new secrets, Scrubber.Grow, for whatever
// else could repeat them — redact's TestGrowReachesExistingHolders.)
func TestReloadedJobSecretsAreMasked(t *testing.T) {
	const secret = "reloaded-api-key-0123456789"
	db := filepath.Join(t.TempDir(), "d.db")
	var log syncLog
	d, _ := startWith(t, lifeYAML, db, &log)
	<-d.Ready()
	withHTTP := lifeYAML + `
  - name: call
    schedule: "@every 100ms"
    http: {url: "http://127.0.0.1:1/hook?api_key=` + secret + `"}
`
	cfg := parseYAML(t, filepath.Dir(d.cfg.path), withHTTP) // the same (default) backend URL
	if err := d.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !regexp.MustCompile(`job=call .*127\.0\.0\.1:1`).MatchString(log.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("the added job's failed call is not in the log:\n%s", log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := log.String(); strings.Contains(s, secret) {
		t.Fatalf("the reloaded job's api_key reached the log:\n%s", s)
	}
}
