package redlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/redlock"
)

// Every option refuses a bad argument with backend.ErrInvalid, naming the
// option and the value, before New reaches a node.
func TestOptionsValidated(t *testing.T) {
	var cs []goredis.UniversalClient
	for range 3 {
		c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}) // never dialled
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	for _, tc := range []struct {
		opt  redlock.Option
		want string
	}{
		{redlock.WithPrefix("a{b}:"), `WithPrefix("a{b}:")`},
		{redlock.WithPrefix("a\nb"), `WithPrefix("a\nb")`},
		{redlock.WithNodeTimeout(0), "WithNodeTimeout(0s)"},
		{redlock.WithNodeTimeout(-time.Second), "WithNodeTimeout(-1s)"},
		{nil, "nil redlock option"},
	} {
		_, err := redlock.New(cs, tc.opt)
		if !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New = %v, want ErrInvalid containing %q", err, tc.want)
		}
	}
}
