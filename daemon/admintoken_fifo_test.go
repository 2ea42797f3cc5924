//go:build unix

package daemon

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestTokenFileFIFORefused (issue 27 item 8): a FIFO planted at the token
// file's path hung "leasehold run" (deaf to SIGTERM) and "leasehold
// status" in open(2), waiting for a writer. Both readers refuse it at
// once as not a regular file.
func TestTokenFileFIFORefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lh.db"+AdminTokenSuffix)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, read := range map[string]func() error{
		"ReadAdminToken (leasehold status)": func() error { _, err := ReadAdminToken(path); return err },
		"loadOrCreateToken (leasehold run)": func() error { _, _, err := loadOrCreateToken(path); return err },
	} {
		done := make(chan error, 1)
		go func() { done <- read() }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrConfig) {
				t.Errorf("%s of a FIFO: %v, want ErrConfig (not a regular file)", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s of a FIFO still blocked after 10 s", name)
		}
	}
}
