package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	_ "modernc.org/sqlite" // the "sqlite" driver, for hasLeaseholdTables's read-only look

	"github.com/leasehold/leasehold/backend"
	bopen "github.com/leasehold/leasehold/backend/open"
	"github.com/leasehold/leasehold/internal/open"
)

// configFlagHelp is the help of the read commands' --config flag.
const configFlagHelp = "the daemon's config `file`: read its backend and namespace (--backend and --namespace still override)"

// targetHelp says where the read commands take their backend and namespace
// from; it ends their Long help.
const targetHelp = `The backend and namespace are, first that applies: --backend and
--namespace; with --config, the daemon config's backend and namespace (its
default SQLite file next to it when it names none); $LEASEHOLD_BACKEND and
the default namespace; the default SQLite file.`

// openTarget opens the backend a read command reads and returns it with
// the namespace: the daemon config's when --config is given (path not
// ""), with --backend and --namespace overriding it; else the command
// line's (or the default).
func (a *app) openTarget(ctx context.Context, cmd *cobra.Command, path string) (backend.Leases, string, error) {
	if path == "" {
		if err := a.mustExist(a.backendURL); err != nil {
			return nil, "", err
		}
		b, err := a.openBackend(ctx)
		return b, a.namespace, err
	}
	cfg, err := a.loadConfig(cmd, path)
	if err != nil {
		return nil, "", err
	}
	if err := a.mustExist(cfg.Backend); err != nil {
		return nil, "", err
	}
	b, err := a.openURL(ctx, cfg.Backend)
	return b, cfg.Namespace, err
}

// schemeRE matches a URL's scheme (as backend/open tells a URL from a
// bare SQLite path).
var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// sqliteFile returns the file a SQLite backend URL (or bare path) names,
// resolved as backend/open resolves it; ok is false for any other backend
// or a URL it cannot read (opening it reports that).
func sqliteFile(raw string) (path string, ok bool) {
	if bopen.LooksLikeHostPort(raw) {
		return "", false // opening it says what is wrong (ErrInvalid: exit 64)
	}
	if !schemeRE.MatchString(raw) {
		return raw, raw != ""
	}
	u, err := url.Parse(raw)
	if err != nil || !strings.EqualFold(u.Scheme, "sqlite") {
		return "", false
	}
	switch {
	case u.Opaque != "":
		p, err := url.PathUnescape(u.Opaque)
		return p, err == nil && p != ""
	case u.Host != "":
		return u.Host + u.Path, true
	default:
		return u.Path, u.Path != ""
	}
}

// mustExist fails when raw ("" = the default backend) is a SQLite file
// that does not exist: a read command (locks, runs, jobs, doctor) shows
// what is there and never creates a database — a mistyped path or
// host:port would otherwise leave a new empty file behind and show
// nothing, as if all were well.
func (a *app) mustExist(raw string) error {
	if raw == "" {
		var err error
		if raw, err = open.DefaultURL(); err != nil {
			return &exitError{code: ExitInternal, err: err}
		}
	}
	path, ok := sqliteFile(raw)
	if !ok {
		return nil
	}
	if missingFile(path) {
		return &exitError{code: ExitInternal, err: fmt.Errorf("backend %s: no SQLite database at %s: read commands create none "+
			"(a daemon or \"leasehold lock\" creates it; is --backend, --config or $%s right?)", cell(raw), cell(path), open.EnvBackend)}
	}
	if isLeasehold, known := hasLeaseholdTables(path); known && !isLeasehold {
		return &exitError{code: ExitInternal, err: fmt.Errorf("backend %s: %s is a SQLite database without leasehold's tables: read commands create none "+
			"(is --backend, --config or $%s right?)", cell(raw), cell(path), open.EnvBackend)}
	}
	return nil
}

// missingSQLite returns the SQLite file raw ("" = the default backend)
// names, if it names one and it does not exist.
func missingSQLite(raw string) (path string, missing bool) {
	if raw == "" {
		var err error
		if raw, err = open.DefaultURL(); err != nil {
			return "", false
		}
	}
	path, ok := sqliteFile(raw)
	return path, ok && missingFile(path)
}

// missingFile reports whether nothing is at path.
func missingFile(path string) bool {
	_, err := os.Stat(path)
	return errors.Is(err, fs.ErrNotExist)
}

// hasLeaseholdTables reports whether the SQLite file at path has
// leasehold's leases table, read through a read-only connection (which
// creates nothing); known is false when it could not be read that way
// (opening it normally then reports what is wrong, or migrates it).
func hasLeaseholdTables(path string) (isLeasehold, known bool) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false, false
	}
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: abs, RawQuery: "mode=ro"}).String())
	if err != nil {
		return false, false
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'leases'`).Scan(&n); err != nil {
		return false, false
	}
	return n > 0, true
}
