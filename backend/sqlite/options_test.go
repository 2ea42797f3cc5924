package sqlite_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/sqlite"
)

// A bad option is refused with backend.ErrInvalid, naming the option and
// the value, before Open creates the database.
func TestOptionsValidated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leasehold.db")
	for _, tc := range []struct {
		opt  sqlite.Option
		want string
	}{
		{sqlite.WithBusyTimeout(0), "WithBusyTimeout(0s)"},
		{sqlite.WithBusyTimeout(time.Hour), "WithBusyTimeout(1h0m0s)"},
		{nil, "nil sqlite option"},
	} {
		_, err := sqlite.Open(context.Background(), path, tc.opt)
		if !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open = %v, want ErrInvalid containing %q", err, tc.want)
		}
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused Open left %s behind: %v", path, err)
	}
}
