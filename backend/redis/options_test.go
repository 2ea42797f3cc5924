package redis_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/redis"
)

// Every option refuses a bad argument with backend.ErrInvalid, naming the
// option and the value, before New reaches the server.
func TestOptionsValidated(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { c.Close() })
	for _, tc := range []struct {
		opt  redis.Option
		want string
	}{
		{redis.WithPrefix("a{b}:"), `WithPrefix("a{b}:")`},
		{redis.WithPrefix("a\nb"), `WithPrefix("a\nb")`},
		{redis.WithProbeTimeout(0), "WithProbeTimeout(0s)"},
		{redis.WithProbeTimeout(-time.Second), "WithProbeTimeout(-1s)"},
		{redis.WithWaitReplicas(-1, time.Second), "WithWaitReplicas(-1, 1s)"},
		{redis.WithWaitReplicas(2, time.Microsecond), "WithWaitReplicas(2, 1µs)"},
		{nil, "nil redis option"},
	} {
		_, err := redis.New(c, tc.opt)
		if !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New = %v, want ErrInvalid containing %q", err, tc.want)
		}
	}
}
