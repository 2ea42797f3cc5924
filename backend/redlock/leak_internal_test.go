package redlock

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/backend"
	rb "github.com/leasehold/leasehold/backend/redis"
	"github.com/leasehold/leasehold/internal/redispipe"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// made records the pipes and node backends New and Open make, through
// their hooks, until the test ends.
type made struct {
	mu      sync.Mutex
	pipes   []*redispipe.Pipe
	watches []*rb.Backend // New's, over the caller's client
	opened  []*rb.Backend // Open's, each owning its connection
}

// record returns the log and an Option that makes New or Open log what
// they make.
func record() (*made, Option) {
	m := &made{}
	return m, func(c *config) error {
		pipe, watch, open := c.make.newPipe, c.make.newWatch, c.make.openNode
		c.make.newPipe = func(cl goredis.UniversalClient) *redispipe.Pipe {
			p := pipe(cl)
			m.mu.Lock()
			defer m.mu.Unlock()
			m.pipes = append(m.pipes, p)
			return p
		}
		c.make.newWatch = func(cl goredis.UniversalClient, opts ...rb.Option) (*rb.Backend, error) {
			w, err := watch(cl, opts...)
			if err == nil {
				m.mu.Lock()
				defer m.mu.Unlock()
				m.watches = append(m.watches, w)
			}
			return w, err
		}
		c.make.openNode = func(ctx context.Context, u string, opts ...rb.Option) (*rb.Backend, error) {
			w, err := open(ctx, u, opts...)
			if err == nil {
				m.mu.Lock()
				defer m.mu.Unlock()
				m.opened = append(m.opened, w)
			}
			return w, err
		}
		return nil
	}
}

var probeScript = goredis.NewScript(`return 1`)

// closed checks that everything m recorded is closed: a closed pipe
// refuses a call with ErrClosed, so does a closed node backend, and the
// connection of a node backend Open made is closed.
func (m *made) closed(t *testing.T, what string, pipes, watches, opened int) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.pipes) != pipes || len(m.watches) != watches || len(m.opened) != opened {
		t.Fatalf("%s made %d pipes, %d node backends, %d connections; want %d, %d, %d",
			what, len(m.pipes), len(m.watches), len(m.opened), pipes, watches, opened)
	}
	ctx := context.Background()
	for i, p := range m.pipes {
		if err := p.Do(ctx, probeScript, nil).Err(); !errors.Is(err, backend.ErrClosed) {
			t.Errorf("%s: pipe %d: a call after it = %v, want ErrClosed (the pipe was left open)", what, i, err)
		}
	}
	for i, w := range append(append([]*rb.Backend(nil), m.watches...), m.opened...) {
		if _, err := w.Acquire(ctx, "leak/k", backend.Owner{Instance: "x", Nonce: backend.NewNonce()}, MinTTL); !errors.Is(err, backend.ErrClosed) {
			t.Errorf("%s: node backend %d: Acquire after it = %v, want ErrClosed (left open)", what, i, err)
		}
	}
	for i, w := range m.opened {
		if err := w.Client().Ping(ctx).Err(); !errors.Is(err, goredis.ErrClosed) {
			t.Errorf("%s: connection %d Open dialled: Ping after it = %v, want the client closed", what, i, err)
		}
	}
	m.pipes, m.watches, m.opened = nil, nil, nil
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := l.Addr().String()
	l.Close()
	return a
}

// TestFailedNewClosesWhatItMade: a New that fails at its third node
// (a nil client, or a node that refuses connections) closes the pipes and
// node backends it made for the first two; Close closes every pipe once
// (a second Close is a no-op).
func TestFailedNewClosesWhatItMade(t *testing.T) {
	var live []goredis.UniversalClient
	for range 2 {
		srv := testserver.Redis(t)
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		live = append(live, c)
	}
	dead := goredis.NewClient(&goredis.Options{Addr: deadAddr(t), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { dead.Close() })
	m, rec := record()

	if _, err := New(append(live[:2:2], nil), rec); !errors.Is(err, backend.ErrInvalid) {
		t.Fatalf("New with a nil third client: %v, want ErrInvalid", err)
	}
	m.closed(t, "New failing on a nil client", 2, 2, 0)

	if _, err := New(append(live[:2:2], dead), rec); err == nil || !strings.Contains(err.Error(), "redlock node 2") {
		t.Fatalf("New with an unreachable third node: %v, want the error of node 2", err)
	}
	m.closed(t, "New failing on an unreachable node", 2, 2, 0)

	// The caller's clients are not closed by a failed New.
	for i, c := range live {
		if err := c.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("client %d after a failed New: %v (New's caller owns it)", i, err)
		}
	}

	b, err := New(append(live[:2:2], live[0]), rec)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	b.Close()
	m.closed(t, "Close", 3, 3, 0)
}

// TestFailedOpenClosesWhatItDialled: an Open whose third node refuses
// connections closes the connections it dialled to the first two; an
// invalid option fails before any node is dialled.
func TestFailedOpenClosesWhatItDialled(t *testing.T) {
	a, b := testserver.Redis(t), testserver.Redis(t)
	m, rec := record()
	ctx := context.Background()
	url := "redlock://" + a.Addr() + "," + b.Addr() + "," + deadAddr(t)
	if _, err := Open(ctx, url, rec); err == nil || !strings.Contains(err.Error(), "redlock node 2") {
		t.Fatalf("Open with an unreachable third node: %v, want the error of node 2", err)
	}
	m.closed(t, "Open failing on an unreachable node", 0, 0, 2)

	url = "redlock://" + a.Addr() + "," + b.Addr() + "," + a.Addr()
	if _, err := Open(ctx, url, rec, WithNodeTimeout(-1)); !errors.Is(err, backend.ErrInvalid) {
		t.Fatalf("Open with a negative node timeout: %v, want ErrInvalid", err)
	}
	m.closed(t, "Open with an invalid option", 0, 0, 0)

	bk, err := Open(ctx, url, rec)
	if err != nil {
		t.Fatal(err)
	}
	bk.Close()
	m.closed(t, "Close after Open", 3, 3, 3)
}
