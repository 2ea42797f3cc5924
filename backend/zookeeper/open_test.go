package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/backend/zookeeper"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

func TestParseURL(t *testing.T) {
	cfg, err := zookeeper.ParseURL("zk://u:s3cret@h1:2181,h2:2181/app?session_timeout=12s")
	if err != nil {
		t.Fatal(err)
	}
	want := zookeeper.Config{Servers: []string{"h1:2181", "h2:2181"}, Prefix: "/app", Username: "u", Password: "s3cret", SessionTimeout: 12 * time.Second}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("ParseURL = %+v, want %+v", cfg, want)
	}
	for _, bad := range []string{"etcd://u:s3cret@h:1/p", "zk://u:s3cret@/p", "zk://u:s3cret@h:1/p?session_timeout=-1s", "zk://u:s3cret@h:1/p?x=1"} {
		_, err := zookeeper.ParseURL(bad)
		if !errors.Is(err, backend.ErrInvalid) {
			t.Errorf("ParseURL(%q) = %v, want ErrInvalid", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseURL(%q) error shows the password: %v", bad, err)
		}
	}
}

// TestDigestACL: a backend opened with a user creates its nodes readable
// and writable by that user only; an unauthenticated session is refused.
func TestDigestACL(t *testing.T) {
	t.Parallel()
	srv := testserver.ZooKeeper(t)
	b, err := zookeeper.Open(context.Background(), "zk://app:s3cret@"+srv.Addr()+"/secure?session_timeout=10s")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	o := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	g, err := b.Acquire(ctx, "k", o, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	anon := connectPlain(t, srv.Addr())
	if _, _, err := anon.Get("/secure/jobs"); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("unauthenticated read of a protected node: %v, want ErrNoAuth", err)
	}
	if err := b.Release(ctx, "k", o, g.Token); err != nil {
		t.Fatal(err)
	}
}

// connectPlain opens a go-zookeeper client without credentials and waits
// for its session: zk.Connect returns before the session exists, and on a
// loaded host the first requests then fail with "could not connect to a
// server". The test's cleanup closes it.
func connectPlain(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	c, events, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(discard{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	connected := time.After(30 * time.Second)
	for c.State() != zk.StateHasSession {
		select {
		case <-events:
		case <-time.After(20 * time.Millisecond): // in case an event was dropped
		case <-connected:
			t.Fatalf("zookeeper client: no session within 30s (state %v)", c.State())
		}
	}
	return c
}

type discard struct{}

func (discard) Printf(string, ...any) {}

// TestNegotiatedSessionTimeout: the server clamps the requested session
// timeout to its maxSessionTimeout (60 s in testserver); the backend reads
// the granted value and never grants a lease TTL beyond it.
func TestNegotiatedSessionTimeout(t *testing.T) {
	t.Parallel()
	srv := testserver.ZooKeeper(t)
	b := open(t, srv.Addr(), 90*time.Second)
	if got := b.SessionTimeout(); got != 60*time.Second {
		t.Fatalf("SessionTimeout() = %v, want the server's maximum 60s", got)
	}
	o := backend.Owner{Instance: "a", Nonce: backend.NewNonce()}
	g, err := b.Acquire(context.Background(), "k", o, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if g.TTL != 60*time.Second {
		t.Fatalf("granted TTL %v for a 2m request on a 60s session, want 60s", g.TTL)
	}
	short := open(t, srv.Addr(), 200*time.Millisecond)
	if got := short.SessionTimeout(); got != time.Second {
		t.Fatalf("SessionTimeout() = %v for a 200ms request, want the server's minimum 1s", got)
	}
}

// TestParseURLTrailingSlash: zk://host/ means the default prefix, not the
// root (which Open refuses).
func TestParseURLTrailingSlash(t *testing.T) {
	cfg, err := zookeeper.ParseURL("zk://h:2181/")
	if err != nil || cfg.Prefix != "" {
		t.Fatalf("ParseURL(zk://h:2181/) = prefix %q, %v; want the default (empty)", cfg.Prefix, err)
	}
}

// TestNoSessionSaysWhy: a session that never comes (nothing listens on the
// port) is an error that says why, in the client's own words.
func TestNoSessionSaysWhy(t *testing.T) {
	t.Parallel()
	addr := fmt.Sprintf("127.0.0.1:%d", testserver.FreePort(t)) // closed: nothing listens
	_, err := zookeeper.OpenConfig(context.Background(), zookeeper.Config{Servers: []string{addr}, ConnectTimeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "no session with") || !strings.Contains(err.Error(), "failed to connect") {
		t.Fatalf("OpenConfig on a closed port: %v, want no session, saying the connect failed", err)
	}
}
