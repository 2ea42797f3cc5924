package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

func TestOpenURL(t *testing.T) {
	srv := testserver.Redis(t)
	ctx := context.Background()
	admin := client(t, srv.Addr())
	if err := admin.Do(ctx, "ACL", "SETUSER", "app", "on", ">s3cret-pw", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	b, err := redis.Open(ctx, "redis://app:s3cret-pw@"+srv.Addr()+"/3?prefix=svc:&dial_timeout=2s")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer b.Close()
	if b.Prefix() != "svc:" {
		t.Errorf("prefix %q, want svc:", b.Prefix())
	}
	o := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	if _, err := b.Acquire(ctx, "k", o, time.Minute); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	db3 := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), DB: 3})
	defer db3.Close()
	if n, err := db3.Exists(ctx, "svc:lease:{k}", "svc:token:{k}").Result(); err != nil || n != 2 {
		t.Fatalf("db 3 has %d of the lease and counter keys (%v), want 2", n, err)
	}

	for _, c := range []struct{ url, want string }{
		{"redis://app:wrong-pw@" + srv.Addr() + "/0", "WRONGPASS"},
		{"http://app:s3cret-pw@" + srv.Addr(), "scheme"},
		{"redis://app:s3cret-pw@" + srv.Addr() + "/0?bogus=1", "bogus"},
		{"redis://app:s3cret-pw@" + srv.Addr() + "/0?prefix={x}", "brace"},
	} {
		_, err := redis.Open(ctx, c.url)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%s): %v, want an error mentioning %q", strings.ReplaceAll(c.url, "s3cret-pw", "…"), err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "s3cret-pw") || strings.Contains(err.Error(), "wrong-pw")) {
			t.Errorf("error shows the password: %v", err)
		}
	}
	if _, err := redis.Open(ctx, "http://x"); !errors.Is(err, backend.ErrInvalid) {
		t.Errorf("bad scheme: %v, want ErrInvalid", err)
	}
}
