//go:build !linux

package sqlite

import "errors"

var errNotLinux = errors.New("leasehold/sqlite: this backend needs Linux (CLOCK_BOOTTIME and the kernel boot id)")

func bootTime() (int64, error) { return 0, errNotLinux }

func readBootID() (string, error) { return "", errNotLinux }

func checkLocalFS(string) error { return errNotLinux }
