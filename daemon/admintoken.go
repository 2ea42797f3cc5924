package daemon

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/internal/sqliteurl"
)

// AdminTokenSuffix is appended to a SQLite database's path to name the
// file holding the admin token a daemon generates when none is configured.
const AdminTokenSuffix = ".admin-token"

// AdminTokenFile returns where a daemon with backendURL and config file
// configPath keeps its generated admin token: next to the database for
// SQLite ("<db>.admin-token"), else next to the config file
// ("leasehold.admin-token"); "" if neither is known.
func AdminTokenFile(backendURL, configPath string) string {
	if p, ok := sqliteurl.Path(backendURL); ok {
		return p + AdminTokenSuffix
	}
	if configPath == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(absPath(configPath)), "leasehold"+AdminTokenSuffix)
}

// AdminTokenFile returns the generated admin token's file of this config.
func (c *Config) AdminTokenFile() string { return AdminTokenFile(c.Backend, c.path) }

// loadOrCreateToken returns the token in path, creating the file (mode
// 0600, a random 256-bit token) if it does not exist. Several daemons
// starting at once on one database agree: the file appears complete or not
// at all (written aside, then hard-linked into place), and the loser of the
// race reads the winner's. A file that others may read or write, or that
// holds no valid token, is refused.
func loadOrCreateToken(path string) (secret string, created bool, err error) {
	secret, err = readToken(path, true)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return secret, false, err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", false, fmt.Errorf("admin token: %w", err)
	}
	secret = base64.RawURLEncoding.EncodeToString(raw)
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return "", false, fmt.Errorf("admin token file %s: %w (configure http.tokens or $%s instead)", path, err, EnvAdminToken)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err == nil {
		_, err = tmp.WriteString(secret + "\n")
		if err == nil {
			err = tmp.Sync()
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", false, fmt.Errorf("admin token file %s: %w", path, err)
		}
	} else {
		tmp.Close()
		return "", false, fmt.Errorf("admin token file %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		secret, err = readToken(path, true) // another daemon was first
		return secret, false, err
	} else if err != nil {
		return "", false, fmt.Errorf("admin token file %s: %w", path, err)
	}
	return secret, true, nil
}

// ReadAdminToken reads a token file written by a daemon (see
// AdminTokenFile). A file group or others may access is refused (ErrConfigInvalid);
// a missing one is an error wrapping fs.ErrNotExist.
//
// Unlike the daemon, it accepts a file another user owns (root running
// `leasehold status` for a daemon that runs as its own user): a planted
// file could only make it send a token the daemon refuses.
func ReadAdminToken(path string) (string, error) { return readToken(path, false) }

// readToken reads a token file, refusing one that group or others may
// access, a symlink and, when ownOnly, one owned by another user: in a directory others
// can write to, a planted file or link would hand its planter the admin
// token. The checks are made on the opened file (no symlink followed), so
// the file cannot be swapped between the check and the read.
func readToken(path string, ownOnly bool) (string, error) {
	f, err := openNoFollow(path)
	if errors.Is(err, errSymlink) {
		return "", fmt.Errorf("%w: admin token file %s is a symbolic link: refused (delete it to have a new token generated)", ErrConfigInvalid, path)
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("admin token file %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w: admin token file %s is not a regular file", ErrConfigInvalid, path)
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return "", fmt.Errorf("%w: admin token file %s has mode %04o: group and others must have no access (chmod 600 it, or delete it to have a new token generated)", ErrConfigInvalid, path, m)
	}
	if uid, ok := fileOwner(fi); ok && ownOnly && uid != os.Geteuid() {
		return "", fmt.Errorf("%w: admin token file %s is owned by uid %d, not by this user (uid %d): refused (delete it to have a new token generated)", ErrConfigInvalid, path, uid, os.Geteuid())
	}
	data, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("admin token file %s: %w", path, err)
	}
	secret := strings.TrimSpace(string(data))
	if len(secret) < admin.MinTokenLen || strings.ContainsAny(secret, " \t\r\n") {
		return "", fmt.Errorf("%w: admin token file %s: holds %d bytes, not one token of at least %d", ErrConfigInvalid, path, len(secret), admin.MinTokenLen)
	}
	return secret, nil
}
