//go:build unix

package daemon

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

var errSymlink = errors.New("symbolic link")

// openNoFollow opens path for reading without following a final symlink,
// and without blocking on a FIFO (planted there, it would wait for a
// writer forever): the caller then refuses what is not a regular file.
func openNoFollow(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, errSymlink
	}
	return f, err
}

// fileOwner is the uid that owns the file.
func fileOwner(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
