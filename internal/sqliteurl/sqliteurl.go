// Package sqliteurl reads the file path out of a SQLite backend URL the way
// internal/open does, without importing the backends.
package sqliteurl

import (
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
)

var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// Path returns the absolute path of the SQLite file rawURL names: a
// sqlite:///abs, sqlite://rel or sqlite:rel URL, or a bare path. ok is false
// for another backend or a malformed URL.
func Path(rawURL string) (path string, ok bool) {
	if rawURL == "" {
		return "", false
	}
	if !schemeRE.MatchString(rawURL) {
		path = rawURL
	} else {
		u, err := url.Parse(rawURL)
		if err != nil || !strings.EqualFold(u.Scheme, "sqlite") {
			return "", false
		}
		switch {
		case u.Opaque != "": // sqlite:rel/path.db
			if path, err = url.PathUnescape(u.Opaque); err != nil {
				return "", false
			}
		case u.Host != "": // sqlite://rel/path.db
			path = u.Host + u.Path
		default: // sqlite:///abs/path.db
			path = u.Path
		}
	}
	if path == "" {
		return "", false
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", false
	}
	return abs, true
}
