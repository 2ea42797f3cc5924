//go:build linux

package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
)

// TestDatabaseFilesPrivate (issue 27 item 5): the database, its -wal and
// its -shm are created for the owner only (0600), whatever the umask lets
// through (here 022, the usual one, which made them 0644: any local user
// read the run history, job output included, that the API refused); an
// existing database others may read is refused, naming it and its mode.
func TestDatabaseFilesPrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "runs.db")
	b, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	o := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	if _, err := b.Acquire(ctx, "k", o, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if m := fi.Mode().Perm(); m&0o077 != 0 {
			t.Errorf("%s has mode %04o, want 0600", filepath.Base(f), m)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, path)
	if !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "0644") {
		t.Fatalf("Open of a database others may read = %v, want ErrInvalid naming the file and its mode 0644", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("the refused open changed the file: %v, %v", fi.Mode(), err)
	}
	if err := os.Chmod(path, 0o640); err != nil { // a group may share it
		t.Fatal(err)
	}
	b, err = Open(ctx, path)
	if err != nil {
		t.Fatalf("Open of a database only its group may read: %v", err)
	}
	b.Close()
}

// TestSymlinkedWALRefused: the -wal and -shm are SQLite's own files next to
// the database, never links. One that is a symbolic link (left by whoever
// may write the directory, pointing to a file they read) passed the mode
// check, which followed it; SQLite then failed with "unable to open
// database file" naming the database only. Open refuses it as bad input,
// naming the link; nothing is written where it points.
func TestSymlinkedWALRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "runs.db")
	b, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		for _, dangling := range []bool{false, true} {
			target := filepath.Join(t.TempDir(), "elsewhere")
			if !dangling {
				if err := os.WriteFile(target, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			link := path + suffix
			_ = os.Remove(link)
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			b, err := Open(ctx, path)
			if err == nil {
				_, aerr := b.Acquire(ctx, "k", backend.Owner{Instance: "a", Nonce: backend.NewNonce()}, time.Minute)
				fi, serr := os.Stat(target)
				b.Close()
				t.Errorf("Open with %s a symlink (dangling %v) succeeded; Acquire: %v; its target: %v %v", filepath.Base(link), dangling, aerr, fi, serr)
			} else if !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), link) {
				t.Errorf("Open with %s a symlink = %v, want ErrInvalid naming it", filepath.Base(link), err)
			}
			if fi, err := os.Stat(target); dangling && !errors.Is(err, os.ErrNotExist) || !dangling && (err != nil || fi.Size() != 0) {
				t.Errorf("the link's target was written or created: %v %v", fi, err)
			}
			if err := os.Remove(link); err != nil {
				t.Fatal(err)
			}
		}
	}
}
