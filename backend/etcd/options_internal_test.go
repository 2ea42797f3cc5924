package etcd

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/backend"
)

// Every option refuses a bad argument with backend.ErrInvalid, naming the
// option and the value; a good one sets its field.
func TestOptionsValidated(t *testing.T) {
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{WithPrefix("a\x00/"), `WithPrefix("a\x00/")`},
		{WithPrefix(strings.Repeat("p", backend.MaxKeyLen)), `WithPrefix("ppp`},
		{nil, "nil etcd option"},
	} {
		var cfg Config
		err := cfg.apply([]Option{tc.opt})
		if !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("apply = %v, want ErrInvalid containing %q", err, tc.want)
		}
	}
	var cfg Config
	if err := cfg.apply([]Option{WithPrefix("app"), WithNoCompact(true)}); err != nil || cfg.Prefix != "app" || !cfg.NoCompact {
		t.Fatalf("apply = %v, Config %+v, want prefix app and NoCompact", err, cfg)
	}
}
