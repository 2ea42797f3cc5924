// Package open chooses and opens a leasehold backend for the command-line
// tool and the daemon: a URL through the public table of package
// backend/open (every scheme, SQLite bare paths, redaction), and the
// default when none is given (DefaultURL: $LEASEHOLD_BACKEND, else a SQLite
// file in the XDG state directory).
package open

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/leasehold/leasehold/backend"
	bopen "github.com/leasehold/leasehold/backend/open"
)

// EnvBackend is the environment variable that overrides the default backend
// URL.
const EnvBackend = "LEASEHOLD_BACKEND"

// Schemes returns the URL schemes Open knows, sorted.
func Schemes() []string { return bopen.Schemes() }

// Open opens the backend that rawURL names (see package backend/open). A
// malformed URL, an unknown scheme or an unknown parameter gives an error
// wrapping backend.ErrInvalid. The caller closes the backend.
func Open(ctx context.Context, rawURL string) (backend.Leases, error) {
	return bopen.Open(ctx, rawURL)
}

// OpenLedger opens the backend that rawURL names and requires that it keep a
// run ledger (see backend.LedgerOf); otherwise it closes it and returns an
// error wrapping backend.ErrNoLedger.
func OpenLedger(ctx context.Context, rawURL string) (backend.Backend, error) {
	l, err := bopen.Open(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	b, err := backend.LedgerOf(l)
	if err != nil {
		l.Close()
		return nil, err
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
