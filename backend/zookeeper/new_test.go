package zookeeper_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/zookeeper"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestNew: New connects with the caller's go-zookeeper options (here a
// dialer that counts its dials), grants and refuses locks like Open, and
// owns its session: Close ends it, so the lock is free at once.
func TestNew(t *testing.T) {
	t.Parallel()
	srv := testserver.ZooKeeper(t)
	var dials atomic.Int32
	dialer := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		dials.Add(1)
		return net.DialTimeout(network, addr, timeout)
	}
	ctx := context.Background()
	b, err := zookeeper.New(ctx, []string{srv.Addr()},
		zookeeper.WithPrefix("/new"), zookeeper.WithSessionTimeout(10*time.Second),
		zookeeper.WithConnectTimeout(30*time.Second), zookeeper.WithConnOptions(zk.WithDialer(dialer)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if dials.Load() == 0 {
		t.Fatal("New did not connect through the caller's dialer")
	}
	if b.Prefix() != "/new" || b.SessionTimeout() != 10*time.Second {
		t.Fatalf("prefix %q, session timeout %v; want /new, 10s", b.Prefix(), b.SessionTimeout())
	}
	a := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	if _, err := b.Acquire(ctx, "k", a, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	other := open(t, srv.Addr(), 10*time.Second, "/new")
	c := backend.Owner{Instance: "c", Nonce: backend.NewNonce()}
	var held *backend.HeldError
	if _, err := other.Acquire(ctx, "k", c, 5*time.Second); !errors.As(err, &held) {
		t.Fatalf("Acquire of a key held through New's backend: %v, want a HeldError", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, "k", a, 5*time.Second); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Acquire after Close: %v, want ErrClosed", err)
	}
	// Close closed the session, whose ephemeral lock node went with it:
	// the key is free well before the holder's 5 s TTL would have ended.
	acquireWithin(t, other, "k", 2*time.Second, "after New's backend was closed")
}

// TestNewBadOptions: a bad setting is refused before connecting, with an
// error wrapping ErrInvalid that names the field and the value.
func TestNewBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		servers []string
		opts    []zookeeper.Option
		want    string
	}{
		{"no servers", nil, nil, "servers are empty"},
		{"empty server", []string{"h:2181", ""}, nil, `servers ["h:2181" ""] include an empty address`},
		{"session timeout", []string{"h:2181"}, []zookeeper.Option{zookeeper.WithSessionTimeout(-time.Second)}, "WithSessionTimeout(-1s): negative"},
		{"connect timeout", []string{"h:2181"}, []zookeeper.Option{zookeeper.WithConnectTimeout(-time.Second)}, "WithConnectTimeout(-1s): negative"},
		{"prefix", []string{"h:2181"}, []zookeeper.Option{zookeeper.WithPrefix("/a//b")}, `prefix "/a//b": path segment "" is not allowed`},
		{"root prefix", []string{"h:2181"}, []zookeeper.Option{zookeeper.WithPrefix("/")}, `prefix "/" is the root`},
		{"dot prefix", []string{"h:2181"}, []zookeeper.Option{zookeeper.WithPrefix("/a/../b")}, `prefix "/a/../b": path segment ".." is not allowed`},
		{"password alone", []string{"h:2181"}, []zookeeper.Option{zookeeper.WithDigestAuth("", "s3cret")}, `WithDigestAuth("", …): empty username`},
		{"nil conn option", []string{"h:2181"}, []zookeeper.Option{zookeeper.WithConnOptions(nil)}, "WithConnOptions: option 0 is nil"},
		{"nil option", []string{"h:2181"}, []zookeeper.Option{nil}, "nil zookeeper option"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := zookeeper.New(context.Background(), tc.servers, tc.opts...)
			if !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want ErrInvalid saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("error shows the password: %v", err)
			}
		})
	}
}

// TestOpenOptions: Open's options apply over the URL.
func TestOpenOptions(t *testing.T) {
	t.Parallel()
	srv := testserver.ZooKeeper(t)
	b, err := zookeeper.Open(context.Background(), "zk://"+srv.Addr()+"/fromurl?session_timeout=10s",
		zookeeper.WithPrefix("/fromopt"), zookeeper.WithSessionTimeout(12*time.Second), zookeeper.WithConnectTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Prefix() != "/fromopt" || b.SessionTimeout() != 12*time.Second {
		t.Fatalf("prefix %q, session timeout %v; want /fromopt, 12s", b.Prefix(), b.SessionTimeout())
	}
	if _, err := zookeeper.Open(context.Background(), "zk://"+srv.Addr()+"/p", zookeeper.WithSessionTimeout(-time.Second)); !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), "WithSessionTimeout(-1s)") {
		t.Fatalf("Open with a negative session timeout = %v, want ErrInvalid naming it", err)
	}
}
