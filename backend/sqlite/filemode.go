package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/leasehold/leasehold/backend"
)

// ensurePrivate creates the database file at path for its owner only
// (0600) when it does not exist — SQLite would create it 0644 less the
// umask, and gives its -wal and -shm files the database's mode — and
// refuses an existing database, -wal or -shm that others may access: the
// run history holds job output that the admin API shows only with a token.
// Group access is allowed (daemons of one group sharing a database). A
// -wal or -shm that is a symbolic link is refused, naming it.
func ensurePrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		return f.Close()
	case !errors.Is(err, fs.ErrExist):
		return fmt.Errorf("sqlite: create %s: %w", path, err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		stat := os.Stat
		if p != path {
			stat = os.Lstat // SQLite's own files: never a link
		}
		fi, err := stat(p)
		if errors.Is(err, fs.ErrNotExist) && p != path {
			continue
		}
		if err != nil {
			return fmt.Errorf("sqlite: %s: %w", p, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%w: sqlite file %s is a symbolic link: SQLite creates it next to the database, and would not write the run history where a link points; remove it",
				backend.ErrInvalid, p)
		}
		if m := fi.Mode().Perm(); m&0o007 != 0 {
			return fmt.Errorf("%w: sqlite database file %s has mode %04o: every local user may read its run history (job output included); chmod o-rwx it (600, or 640 to share it with a group)",
				backend.ErrInvalid, p, m)
		}
	}
	return nil
}
