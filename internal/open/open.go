// Package open chooses and opens a leasehold backend from a URL, for the
// command-line tool and the daemon.
//
// Supported forms:
//
//	memory://                  an in-process memory backend (one process only)
//	sqlite:///abs/path.db      a SQLite file, absolute path
//	sqlite://rel/path.db       a SQLite file, relative to the working directory
//	/abs/path.db, ./rel.db     a bare path (no scheme) is a SQLite file
//
// A SQLite URL may carry the query parameters busy_timeout (a Go duration,
// such as 5s) and synchronous (full or normal); see package backend/sqlite.
// A bare path whose first segment contains a colon must be written with a
// leading "./" so that it is not read as a scheme.
//
// Errors about a URL show it through (*url.URL).Redacted, so a password in
// it is never printed.
package open

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/etcd"
	"github.com/leasehold/leasehold/backend/memory"
	"github.com/leasehold/leasehold/backend/mysql"
	"github.com/leasehold/leasehold/backend/postgres"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/backend/sqlite"
	"github.com/leasehold/leasehold/backend/zookeeper"
)

// EnvBackend is the environment variable that overrides the default backend
// URL.
const EnvBackend = "LEASEHOLD_BACKEND"

// Schemes returns the URL schemes Open knows, sorted.
func Schemes() []string {
	return []string{"etcd", "memory", "mysql", "postgres", "postgresql", "redis", "rediss", "sqlite", "zk"}
}

// schemeRE matches a URL scheme prefix (RFC 3986 section 3.1).
var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// Open opens the backend that rawURL names. A malformed URL, an unknown
// scheme or an unknown parameter gives an error wrapping backend.ErrInvalid.
// The caller closes the backend.
func Open(ctx context.Context, rawURL string) (backend.Backend, error) {
	if rawURL == "" {
		return nil, fmt.Errorf("%w: backend URL is empty", backend.ErrInvalid)
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
	switch strings.ToLower(u.Scheme) {
	case "memory":
		if u.User != nil || u.Host != "" || u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("%w: backend URL %q: memory:// takes no host, path or parameters", backend.ErrInvalid, u.Redacted())
		}
		return memory.New(), nil
	case "sqlite":
		if u.User != nil {
			return nil, fmt.Errorf("%w: backend URL %q: sqlite takes no user or password", backend.ErrInvalid, u.Redacted())
		}
		if u.Fragment != "" {
			return nil, fmt.Errorf("%w: backend URL %q: sqlite takes no fragment", backend.ErrInvalid, u.Redacted())
		}
		var path string
		switch {
		case u.Opaque != "": // sqlite:rel/path.db
			path, err = url.PathUnescape(u.Opaque)
			if err != nil {
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
	case "redis", "rediss": // redis://user:pass@host:port/db?prefix=...; see backend/redis
		return redis.Open(ctx, rawURL)
	case "postgres", "postgresql": // a libpq URL; see backend/postgres
		return postgres.Open(ctx, rawURL)
	case "mysql": // mysql://user:pass@host:port/db; see backend/mysql
		return mysql.Open(ctx, rawURL)
	case "etcd": // etcd://user:pass@h1:2379,h2:2379/prefix; see backend/etcd
		return etcd.Open(ctx, rawURL)
	case "zk": // zk://h1:2181,h2:2181/prefix; see backend/zookeeper
		return zookeeper.Open(rawURL)
	default:
		return nil, fmt.Errorf("%w: backend URL %q: unknown scheme %q (known: %s)",
			backend.ErrInvalid, u.Redacted(), u.Scheme, strings.Join(Schemes(), ", "))
	}
}

// urlErrReason returns the reason of a url.Parse error without the URL.
func urlErrReason(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return "unparsable"
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

func openSQLite(ctx context.Context, path string, opts []sqlite.Option, shown string) (backend.Backend, error) {
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

// DefaultURL returns the backend to use when none is given: the value of
// $LEASEHOLD_BACKEND if it is set, else the SQLite file
// $XDG_STATE_HOME/leasehold/leasehold.db (with $XDG_STATE_HOME defaulting to
// ~/.local/state, and ignored if it is not absolute, as the XDG Base
// Directory specification says). For the latter it creates the directory
// with mode 0700 if it does not exist.
func DefaultURL() (string, error) {
	if v := os.Getenv(EnvBackend); v != "" {
		return v, nil
	}
	dir, err := defaultDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("default backend directory: %w", err)
	}
	return "sqlite://" + (&url.URL{Path: filepath.Join(dir, "leasehold.db")}).EscapedPath(), nil
}

func defaultDir() (string, error) {
	state := os.Getenv("XDG_STATE_HOME")
	if !filepath.IsAbs(state) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("default backend: set $%s or $XDG_STATE_HOME: %w", EnvBackend, err)
		}
		state = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(state, "leasehold"), nil
}
