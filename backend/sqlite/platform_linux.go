//go:build linux

package sqlite

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

const bootIDPath = "/proc/sys/kernel/random/boot_id"

// bootTime reads CLOCK_BOOTTIME in nanoseconds: monotonic, shared by every
// process on the host, counting through suspend, never stepped.
func bootTime() (int64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0, fmt.Errorf("clock_gettime(CLOCK_BOOTTIME): %w", err)
	}
	return ts.Nano(), nil
}

// readBootID reads the kernel's boot id, which changes on every boot.
func readBootID() (string, error) {
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return "", fmt.Errorf("sqlite: reading the kernel boot id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("sqlite: %s is empty", bootIDPath)
	}
	return id, nil
}

// checkLocalFS refuses a database whose directory is on a network
// filesystem.
func checkLocalFS(path string) error {
	dir := filepath.Dir(path)
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("sqlite: database %s: statfs %s: %w", path, dir, err)
	}
	magic := uint32(st.Type)
	if name, bad := networkFS(magic); bad {
		return fmt.Errorf("%w: database %s is on %s (filesystem magic %#x); SQLite's WAL locking is unsafe there, use a local disk",
			ErrNetworkFS, path, name, magic)
	}
	return nil
}
