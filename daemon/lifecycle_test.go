package daemon

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/internal/testkit/eventually"
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

// startWith runs a daemon of yml on the SQLite file db, logging into log.
func startWith(t *testing.T, yml, db string, log *testkit.Buffer) (*Daemon, chan error) {
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

// A job added by Reload has its secrets masked in the log like the jobs of
// the first config. (Its errors are scrubbed by its own scrubber; the
// daemon's logger also learns the new secrets, Scrubber.Grow, for whatever
// else could repeat them — redact's TestGrowReachesExistingHolders.)
func TestReloadedJobSecretsAreMasked(t *testing.T) {
	const secret = "reloaded-api-key-0123456789"
	db := filepath.Join(t.TempDir(), "d.db")
	var log testkit.Buffer
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
	failedCall := regexp.MustCompile(`job=call .*127\.0\.0\.1:1`)
	if !eventually.Within(20*time.Second, func() bool { return failedCall.MatchString(log.String()) }) {
		t.Fatalf("the added job's failed call is not in the log:\n%s", log.String())
	}
	if s := log.String(); strings.Contains(s, secret) {
		t.Fatalf("the reloaded job's api_key reached the log:\n%s", s)
	}
}
