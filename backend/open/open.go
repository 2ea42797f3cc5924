// Package open opens a leasehold backend from a URL, for a program that
// takes the backend from its configuration:
//
//	b, err := open.Open(ctx, cfg.BackendURL) // "redis://127.0.0.1:6379/0", "sqlite:///var/lib/app/locks.db", ...
//	if err != nil { ... }
//	defer b.Close()
//	locker, err := leasehold.NewLocker(b)
//
// Backends returns the table it opens from: one Descriptor per backend,
// with its URL schemes, the URL form and a one-line summary (what
// "leasehold --help" prints). The table is a plain value built on each call;
// nothing registers itself, and a program that needs a backend the table
// does not know opens it with that backend's own Open.
//
// Open returns a backend.Leases: every backend keeps leases; the ones that
// also keep the scheduler's run ledger implement backend.Ledger too (see
// backend.LedgerOf). A bare path with no scheme is a SQLite file (a path
// whose first segment contains a colon needs a leading "./").
//
// Errors about a URL show it through (*url.URL).Redacted, so a password in
// it is never printed; bad input wraps backend.ErrInvalid and names the
// field and value.
package open

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/mysql"
	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/backend/redlock"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/backend/zookeeper"
	"github.com/leasehold/leasehold/internal/redact"
)

// Descriptor describes one backend a URL can name.
type Descriptor struct {
	// Name is the backend's name, as its Capabilities report it.
	Name string
	// Schemes are the URL schemes that open it, lower case; the first is
	// the one to write.
	Schemes []string
	// Form is the URL form, for help texts.
	Form string
	// Summary says in one line what the backend is and what it guarantees.
	Summary string
	// Examples are example URLs with a note each, for help texts.
	Examples []string
	// Ledger: the backend keeps the scheduler's run ledger (it implements
	// backend.Ledger), so jobs and the daemon can use it.
	Ledger bool
	// Open opens the backend rawURL names; u is rawURL parsed, its scheme
	// one of Schemes.
	Open func(ctx context.Context, rawURL string, u *url.URL) (backend.Leases, error)
}

// Backends returns the table of backends Open knows, in the order help
// texts list them. Each call builds a new slice.
func Backends() []Descriptor {
	return []Descriptor{
		{Name: "memory", Ledger: true, Schemes: []string{"memory"}, Form: "memory://",
			Summary: "in-process, one process only (tests)", Open: openMemory},
		{Name: "sqlite", Ledger: true, Schemes: []string{"sqlite"}, Form: "sqlite:///abs/path.db, sqlite://rel/path.db, or a bare path",
			Summary: "a SQLite file shared by the processes of one host; ?busy_timeout=5s&synchronous=full|normal", Open: openSQLiteURL},
		{Name: "postgres", Ledger: true, Schemes: []string{"postgres", "postgresql"}, Form: "postgres://user:pass@host:5432/db?sslmode=...",
			Summary: "PostgreSQL; durable fencing when fsync and synchronous_commit are on",
			Open: func(ctx context.Context, raw string, _ *url.URL) (backend.Leases, error) {
				return postgres.Open(ctx, raw)
			}},
		{Name: "mysql", Ledger: true, Schemes: []string{"mysql"}, Form: "mysql://user:pass@host:3306/db",
			Summary: "MySQL or MariaDB (InnoDB); durable fencing when the redo log is flushed at commit",
			Open: func(ctx context.Context, raw string, _ *url.URL) (backend.Leases, error) {
				return mysql.Open(ctx, raw)
			}},
		{Name: "redis", Ledger: true, Schemes: []string{"redis", "rediss"}, Form: "redis[s]://[user:pass@]host:6379/db?prefix=P",
			Summary: "one Redis node, a Cluster or a Sentinel-managed primary; fencing survives a restart only with appendonly yes + appendfsync always, and a failover only with wait_replicas",
			Examples: []string{
				"redis://app:PW@10.0.0.5:6379/0                                  one node",
				"redis://app:PW@h1:7000?addr=h2:7000&addr=h3:7000                a Cluster (seeds)",
				"redis://sen:SPW@s1:26379?master_name=mymaster&addr=s2:26379&password=PW   Sentinel",
				"rediss://…&wait_replicas=1&wait_timeout=200ms                   TLS; WAIT for 1 replica per grant",
			},
			Open: func(ctx context.Context, raw string, _ *url.URL) (backend.Leases, error) {
				return redis.Open(ctx, raw)
			}},
		{Name: "redlock", Schemes: []string{"redlock", "redlocks"}, Form: "redlock[s]://[user:pass@]h1:6379,h2:6379,h3:6379/db?node_timeout=100ms",
			Summary: "Redlock over N independent Redis nodes; no safe fencing and no run ledger",
			Open: func(ctx context.Context, raw string, _ *url.URL) (backend.Leases, error) {
				return redlock.Open(ctx, raw)
			}},
		{Name: "etcd", Ledger: true, Schemes: []string{"etcd"}, Form: "etcd://[user:pass@]h1:2379,h2:2379/prefix?cacert=F&cert=F&key=F",
			Summary: "etcd v3 (Raft); durable fencing by revision",
			Open: func(ctx context.Context, raw string, _ *url.URL) (backend.Leases, error) {
				return etcd.Open(ctx, raw)
			}},
		{Name: "zookeeper", Ledger: true, Schemes: []string{"zk"}, Form: "zk://h1:2181,h2:2181/prefix?session_timeout=10s",
			Summary: "ZooKeeper (ZAB); durable fencing by zxid",
			Open: func(ctx context.Context, raw string, _ *url.URL) (backend.Leases, error) {
				return zookeeper.Open(ctx, raw)
			}},
	}
}

// Lookup returns the descriptor of the backend scheme opens (case
// insensitive).
func Lookup(scheme string) (Descriptor, bool) {
	scheme = strings.ToLower(scheme)
	for _, d := range Backends() {
		if slices.Contains(d.Schemes, scheme) {
			return d, true
		}
	}
	return Descriptor{}, false
}

// Schemes returns every URL scheme Open knows, sorted.
func Schemes() []string {
	var s []string
	for _, d := range Backends() {
		s = append(s, d.Schemes...)
	}
	slices.Sort(s)
	return s
}

// Help returns the backends' URL forms and summaries, one backend per
// line pair, indented for a command's help text.
func Help() string {
	var b strings.Builder
	for _, d := range Backends() {
		fmt.Fprintf(&b, "  %-10s %s\n  %-10s   %s\n", d.Name, d.Form, "", d.Summary)
		for _, e := range d.Examples {
			fmt.Fprintf(&b, "  %-10s     %s\n", "", e)
		}
	}
	return b.String()
}

// schemeRE matches a URL scheme prefix (RFC 3986 section 3.1).
var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// hostPortRE matches a bare "host:port" (no slash; an IPv6 host in
// brackets), which a user means as a server, never as a SQLite file name.
var hostPortRE = regexp.MustCompile(`^(\[[0-9A-Fa-f:.%]+\]|[^/:\[\]]+):[0-9]{1,5}$`)

// LooksLikeHostPort reports whether raw is a bare "host:port" (an IPv6
// host in brackets), which Open refuses: a user means it as a server,
// never as a SQLite file name.
func LooksLikeHostPort(raw string) bool { return hostPortRE.MatchString(raw) }

// Open opens the backend rawURL names (see Backends). A malformed URL, an
// unknown scheme or an unknown parameter gives an error wrapping
// backend.ErrInvalid. The caller closes the backend.
func Open(ctx context.Context, rawURL string) (backend.Leases, error) {
	if rawURL == "" {
		return nil, fmt.Errorf("%w: backend URL is empty", backend.ErrInvalid)
	}
	if LooksLikeHostPort(rawURL) {
		// "127.0.0.1:6379" would otherwise become a SQLite file of that
		// name (a ledger local to each host: every job run once per host),
		// and "localhost:6379" an unknown scheme "localhost".
		return nil, fmt.Errorf("%w: backend URL %q looks like host:port, not a URL or a file path: name the scheme (e.g. redis://%s; known: %s), or write a SQLite file as ./%s",
			backend.ErrInvalid, rawURL, rawURL, strings.Join(Schemes(), ", "), rawURL)
	}
	if !schemeRE.MatchString(rawURL) {
		// A bare path: a SQLite file.
		return openSQLite(ctx, rawURL, nil, rawURL)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the raw URL, password included: do not wrap it.
		return nil, fmt.Errorf("%w: backend URL is malformed (%s)", backend.ErrInvalid, urlErrReason(err))
	}
	d, ok := Lookup(u.Scheme)
	if !ok {
		return nil, fmt.Errorf("%w: backend URL %q: unknown scheme %q (known: %s)",
			backend.ErrInvalid, u.Redacted(), u.Scheme, strings.Join(Schemes(), ", "))
	}
	return d.Open(ctx, rawURL, u)
}

// urlErrReason returns the reason of a url.Parse error without the URL
// or the part of it the reason quotes (a raw password's start).
func urlErrReason(err error) string { return redact.ParseReason(err) }

func openMemory(ctx context.Context, raw string, _ *url.URL) (backend.Leases, error) {
	return memory.Open(ctx, raw)
}

func openSQLiteURL(ctx context.Context, _ string, u *url.URL) (backend.Leases, error) {
	if u.User != nil {
		return nil, fmt.Errorf("%w: backend URL %q: sqlite takes no user or password", backend.ErrInvalid, u.Redacted())
	}
	if u.Fragment != "" {
		return nil, fmt.Errorf("%w: backend URL %q: sqlite takes no fragment", backend.ErrInvalid, u.Redacted())
	}
	var path string
	switch {
	case u.Opaque != "": // sqlite:rel/path.db
		var err error
		if path, err = url.PathUnescape(u.Opaque); err != nil {
			return nil, fmt.Errorf("%w: backend URL %q: %v", backend.ErrInvalid, u.Redacted(), err)
		}
	case u.Host != "": // sqlite://rel/path.db: the "host" is the first segment
		path = u.Host + u.Path
	default: // sqlite:///abs/path.db
		path = u.Path
	}
	if path == "" {
		return nil, fmt.Errorf("%w: backend URL %q has no database path", backend.ErrInvalid, u.Redacted())
	}
	opts, err := sqliteOptions(u)
	if err != nil {
		return nil, err
	}
	return openSQLite(ctx, path, opts, u.Redacted())
}

func sqliteOptions(u *url.URL) ([]sqlite.Option, error) {
	var opts []sqlite.Option
	for name, vals := range u.Query() {
		v := vals[len(vals)-1]
		switch name {
		case "busy_timeout":
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, fmt.Errorf("%w: backend URL %q: busy_timeout %q is not a duration", backend.ErrInvalid, u.Redacted(), v)
			}
			opts = append(opts, sqlite.WithBusyTimeout(d))
		case "synchronous":
			switch strings.ToLower(v) {
			case "full":
				opts = append(opts, sqlite.WithSynchronousFull(true))
			case "normal":
				opts = append(opts, sqlite.WithSynchronousFull(false))
			default:
				return nil, fmt.Errorf("%w: backend URL %q: synchronous %q is not full or normal", backend.ErrInvalid, u.Redacted(), v)
			}
		default:
			return nil, fmt.Errorf("%w: backend URL %q: unknown parameter %q (known: busy_timeout, synchronous)", backend.ErrInvalid, u.Redacted(), name)
		}
	}
	return opts, nil
}

func openSQLite(ctx context.Context, path string, opts []sqlite.Option, shown string) (backend.Leases, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("backend %q: %w", shown, err)
	}
	b, err := sqlite.Open(ctx, abs, opts...)
	if err != nil {
		return nil, fmt.Errorf("backend %q: %w", shown, err)
	}
	return b, nil
}
