package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
	"github.com/leasehold/leasehold/schedule"
)

// hookDaemon runs a daemon of yml (instance, namespace default) over the
// SQLite file db until stop or the end of the test; stop waits for Run to
// return. logs gets its log.
func hookDaemon(t *testing.T, dir, db, name, yml string, logs io.Writer) (d *Daemon, stop func()) {
	t.Helper()
	cfg, err := Parse(filepath.Join(dir, name+".yaml"), []byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	d, err = New(cfg, b, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", name, err)
			}
			b.Close()
		})
	}
	t.Cleanup(stop)
	select {
	case <-d.Ready():
	case err := <-done:
		done <- err
		t.Fatalf("%s stopped: %v", name, err)
	case <-time.After(20 * time.Second):
		t.Fatalf("%s not ready in 20s", name)
	}
	return d, stop
}

// failedRuns reads the occurrences of job the ledger of db records
// failed, as "instant token instance attempt" strings, sorted.
func failedRuns(t *testing.T, db, job string) []string { return runsIn(t, db, job, backend.Failed) }

// runsIn reads the occurrences of job the ledger of db records in state,
// as "instant token instance attempt" strings, sorted.
func runsIn(t *testing.T, db, job string, state backend.RunState) []string {
	t.Helper()
	b, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	runs, err := schedule.NamespaceLedger(b, "default").ListRuns(context.Background(), backend.RunFilter{Job: job, State: state, Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range runs {
		out = append(out, fmt.Sprintf("%s %d %s %d", r.ScheduledAt.UTC().Format(InstantFormat), r.Token, r.Owner.Instance, r.Attempt))
	}
	slices.Sort(out)
	return out
}

// TestCommandHookOncePerFailedOccurrence: two daemons share a failing
// job; each failed occurrence calls the command hook exactly once, on the
// daemon that ran it, with the occurrence in its environment. A job that
// succeeds calls none.
func TestCommandHookOncePerFailedOccurrence(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, calls := filepath.Join(dir, "d.db"), filepath.Join(dir, "calls")
	conf := func(instance string) string {
		return fmt.Sprintf(`
instance: %s
grace: 5s
http: {listen: "off"}
on_failure:
  timeout: 20s
  command:
    argv: ["/bin/sh", "-c", 'echo "$LEASEHOLD_JOB $LEASEHOLD_SCHEDULED_AT $LEASEHOLD_TOKEN $LEASEHOLD_INSTANCE $LEASEHOLD_ATTEMPT|$LEASEHOLD_NAMESPACE|$LEASEHOLD_ERROR|$TEAM" >> %s']
    env: {TEAM: ops}
jobs:
  - name: broken
    schedule: "@every 1s"
    command: {argv: ["/bin/sh", "-c", "echo boom >&2; exit 3"]}
  - name: fine
    schedule: "@every 1s"
    command: {argv: ["true"]}
`, instance, calls)
	}
	var (
		stops   []func()
		daemons []*Daemon
	)
	logs := &testkit.Buffer{}
	for _, name := range []string{"web-1", "web-2"} {
		d, stop := hookDaemon(t, dir, db, name, conf(name), logs)
		stops, daemons = append(stops, stop), append(daemons, d)
	}
	calledFor := func() []string { // "instant token instance attempt" of each hook call, sorted
		data, _ := os.ReadFile(calls)
		var got []string
		for _, l := range strings.FieldsFunc(string(data), func(r rune) bool { return r == '\n' }) {
			head, rest, _ := strings.Cut(l, "|")
			f := strings.Fields(head)
			if len(f) != 5 || f[0] != "broken" {
				t.Fatalf("hook call %q: not the broken job's", l)
			}
			if want := "default|exit status 3|ops"; !strings.HasPrefix(rest, "default|") || !strings.Contains(rest, "exit status 3") || !strings.HasSuffix(rest, "|ops") {
				t.Fatalf("hook call %q: want namespace, error and env like %q", l, want)
			}
			got = append(got, strings.Join(f[1:], " "))
		}
		slices.Sort(got)
		return got
	}
	eventually.True(t, 60*time.Second, "4 hook calls", func() bool { return len(calledFor()) >= 4 })
	// Paused, the job's runs end and its hooks are all called (a shutdown
	// would stop those still in flight after the grace).
	if err := daemons[0].Scheduler().Pause(context.Background(), "broken"); err != nil {
		t.Fatal(err)
	}
	var got, want []string
	if !eventually.Within(90*time.Second, func() bool {
		got, want = calledFor(), failedRuns(t, db, "broken")
		return len(runsIn(t, db, "broken", backend.Running)) == 0 && slices.Equal(got, want)
	}) {
		var hookLog []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "on_failure") {
				hookLog = append(hookLog, l)
			}
		}
		t.Fatalf("hook calls (instant token instance attempt):\n%s\nthe ledger's failed occurrences:\n%s\nthe hooks' log:\n%s",
			strings.Join(got, "\n"), strings.Join(want, "\n"), strings.Join(hookLog, "\n"))
	}
	for _, stop := range stops {
		stop()
	}
	if got, want := calledFor(), failedRuns(t, db, "broken"); !slices.Equal(got, want) {
		t.Fatalf("after the daemons stopped, hook calls:\n%s\nthe ledger's failed occurrences:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	by := map[string]int{}
	for _, g := range got {
		by[strings.Fields(g)[2]]++
	}
	t.Logf("%d failed occurrences, hooks called by %v", len(got), by)
}

// hookServer is an HTTP hook's endpoint for the test's life: each call's
// JSON body is decoded, answer (if not nil) is asked the status for the
// request, the nth call (from 1), and bodies has the calls answered 2xx,
// in the order they came.
func hookServer(t *testing.T, answer func(r *http.Request, call int) int) (url string, bodies func() []HookBody) {
	t.Helper()
	var (
		mu    sync.Mutex
		got   []HookBody
		calls int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		var b HookBody
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			t.Errorf("hook body: %v", err)
		}
		status := http.StatusOK
		if answer != nil {
			status = answer(r, calls)
		}
		if status/100 == 2 {
			got = append(got, b)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []HookBody {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// TestHTTPHookAfterTheLastAttempt: a job retried once calls its HTTP hook
// only when its second attempt failed, with the JSON body and the
// configured headers; a hook answered 500 is logged with its URL masked,
// and no secret of the hook reaches the log.
func TestHTTPHookAfterTheLastAttempt(t *testing.T) {
	t.Parallel()
	const (
		bearer   = "hook-bearer-0123456789abcdef"
		urlToken = "url-token-0123456789abcdef"
	)
	url, bodies := hookServer(t, func(r *http.Request, call int) int {
		if r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer "+bearer || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("hook request: %s, Authorization %q, Content-Type %q", r.Method, r.Header.Get("Authorization"), r.Header.Get("Content-Type"))
		}
		if call == 1 {
			return http.StatusInternalServerError // logged, not retried
		}
		return http.StatusOK
	})
	dir := t.TempDir()
	db := filepath.Join(dir, "d.db")
	yml := fmt.Sprintf(`
instance: web-1
http: {listen: "off"}
jobs:
  - name: flaky
    schedule: "@every 1s"
    retry: {max: 1, backoff: 100ms}
    command: {argv: ["false"]}
    on_failure:
      http:
        url: %s/hook?token=%s
        headers: {Authorization: "Bearer %s"}
`, url, urlToken, bearer)
	logs := &testkit.Buffer{}
	d, stop := hookDaemon(t, dir, db, "web-1", yml, logs)
	eventually.True(t, 60*time.Second, "3 hook calls answered 200", func() bool {
		return len(bodies()) >= 3
	})
	if err := d.Scheduler().Pause(context.Background(), "flaky"); err != nil {
		t.Fatal(err)
	}
	called := func() []string {
		var got []string
		for _, b := range bodies() {
			if b.Namespace != "default" || b.Job != "flaky" || b.Instance != "web-1" || b.Attempt != 2 || !strings.Contains(b.Error, "exit status 1") {
				t.Fatalf("hook body %+v", b)
			}
			got = append(got, fmt.Sprintf("%s %s %s %d", b.ScheduledAt, b.Token, b.Instance, b.Attempt))
		}
		slices.Sort(got)
		return got
	}
	// Paused, the job's runs end (but for an attempt held for its retry,
	// which waits for the resume) and its hooks are all called; the first
	// call (answered 500) is in the ledger, not among bodies.
	var got, want []string
	if !eventually.Within(90*time.Second, func() bool {
		got, want = called(), failedRuns(t, db, "flaky")
		missing := slices.DeleteFunc(slices.Clone(want), func(s string) bool { return slices.Contains(got, s) })
		return len(want) == len(got)+1 && len(missing) == 1 // an attempt held for its retry stays running while paused
	}) {
		t.Fatalf("hook calls answered 200:\n%s\nthe ledger's failed occurrences:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	stop()
	log := logs.String()
	if !strings.Contains(log, "on_failure hook failed") || !strings.Contains(log, "500") {
		t.Errorf("the hook answered 500 is not logged:\n%s", log)
	}
	for _, secret := range []string{bearer, urlToken} {
		if strings.Contains(log, secret) {
			t.Errorf("the log holds the secret %q:\n%s", secret, log)
		}
	}
}

// TestHookConfigErrors: each bad on_failure setting is an error naming the
// field and the value.
func TestHookConfigErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ yml, want string }{
		{`on_failure: {timeout: 5s}`, "on_failure: needs exactly one of command or http"},
		{`on_failure: {command: {argv: [x]}, http: {url: "http://h/"}}`, "on_failure: needs exactly one of command or http"},
		{`on_failure: {command: {argv: [x]}, timeout: -1s}`, "on_failure.timeout: -1s is negative"},
		{`on_failure: {command: {argv: [x]}, timeout: 11m}`, "on_failure.timeout: 11m0s is more than 10m0s"},
		{`on_failure: {command: {argv: []}}`, `on_failure.command.argv: [] needs a program`},
		{`on_failure: {command: {argv: [x], env_passthrough: [LEASEHOLD_ADMIN_TOKEN]}}`, `on_failure.command.env_passthrough: "LEASEHOLD_ADMIN_TOKEN" holds a secret`},
		{`on_failure: {http: {url: "ftp://h/x"}}`, `on_failure.http.url: "ftp://h/x" is not an http(s) URL`},
		{`on_failure: {http: {url: "http://u:hunter2-secret@h/x?token=abc", headers: {"Bad Name": v}}}`, `on_failure.http.headers: header name "Bad Name" is not valid`},
		{`jobs: [{name: j, schedule: "@hourly", command: {argv: ["true"]}, on_failure: {http: {url: "x"}}}]`, `jobs[0].on_failure.http.url: "x" is not an http(s) URL`},
		{`on_failure: {comand: {argv: [x]}}`, `did you mean "command"`},
	} {
		_, err := Parse("/etc/leasehold.yaml", []byte(c.yml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one with %q", c.yml, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2-secret") {
			t.Errorf("%s: the error shows the URL's password: %v", c.yml, err)
		}
	}
}

// TestReloadAppliesTheDefaultHook: a reload that only adds the top-level
// on_failure replaces the jobs it applies to, which then call it.
func TestReloadAppliesTheDefaultHook(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, calls := filepath.Join(dir, "d.db"), filepath.Join(dir, "calls")
	const jobs = `
instance: web-1
http: {listen: "off"}
jobs:
  - name: broken
    schedule: "@every 1s"
    command: {argv: ["false"]}
`
	logs := &testkit.Buffer{}
	d, _ := hookDaemon(t, dir, db, "web-1", jobs, logs)
	cfg, err := Parse(filepath.Join(dir, "web-1.yaml"), []byte(jobs+fmt.Sprintf(`
on_failure:
  command: {argv: ["/bin/sh", "-c", 'echo "$LEASEHOLD_JOB" >> %s']}
`, calls)))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if log := logs.String(); !strings.Contains(log, "changed=[broken]") {
		t.Errorf("the reload did not replace the job:\n%s", log)
	}
	eventually.True(t, 30*time.Second, "the hook is called", func() bool {
		data, _ := os.ReadFile(calls)
		return strings.HasPrefix(string(data), "broken\n")
	})
}

// TestHookOnAbandonedOccurrence: an occurrence whose runner died, under
// crash: skip, is abandoned by the daemon whose sweeper finds it — it
// failed for good, so that daemon calls the job's hook once, with the dead
// attempt's token and who ran it.
func TestHookOnAbandonedOccurrence(t *testing.T) {
	t.Parallel()
	url, bodies := hookServer(t, nil)
	dir := t.TempDir()
	db := filepath.Join(dir, "d.db")
	yml := fmt.Sprintf(`
instance: web-1
http: {listen: "off"}
jobs:
  - name: nightly
    schedule: "0 3 * * *"
    crash: skip
    command: {argv: ["true"]}
    on_failure:
      http: {url: %s/hook}
`, url)
	d, _ := hookDaemon(t, dir, db, "web-1", yml, io.Discard)
	// A runner that died: it claimed an occurrence and its lease ran out.
	b, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l := schedule.NamespaceLedger(b, "default")
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Hour)
	dead := backend.Owner{Instance: "web-9", Nonce: backend.NewNonce()}
	g, err := l.Claim(context.Background(), backend.ClaimRequest{Job: "nightly", ScheduledAt: at, SpecVersion: d.Scheduler().JobStatuses(0)[0].Version,
		Owner: dead, TTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 60*time.Second, "the hook called for the abandoned occurrence", func() bool {
		return len(bodies()) > 0
	})
	if got := runsIn(t, db, "nightly", backend.Abandoned); len(got) != 1 {
		t.Fatalf("abandoned occurrences: %v", got)
	}
	got := bodies()
	b0 := got[0]
	if len(got) != 1 || b0.Job != "nightly" || b0.ScheduledAt != at.Format(InstantFormat) || b0.Token != strconv.FormatUint(g.Token, 10) || b0.Attempt != 1 ||
		b0.Instance != "web-1" || !strings.Contains(b0.Error, "abandoned") || !strings.Contains(b0.Error, "web-9") {
		t.Fatalf("hook calls %+v; want one for nightly at %s, token %v, attempt 1, by web-1, saying web-9's run was abandoned", got, at.Format(InstantFormat), g.Token)
	}
}
