package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/internal/redact"
)

// proveListener makes the listener at c.base prove that it holds c.token
// before the token is sent (admin.VerifyListener): another local user may
// have bound the daemon's address first. The proof is bound to the address
// of the connection it came on, and every later request of c goes over
// that one connection (a new dial is refused), so the token can only reach
// the listener that proved it.
func (c *adminAPI) proveListener(ctx context.Context) error {
	tr, ok := c.client.Transport.(*http.Transport)
	if !ok || tr == nil {
		tr = http.DefaultTransport.(*http.Transport)
	}
	tr = tr.Clone()
	var (
		mu     sync.Mutex
		dialed bool
		d      net.Dialer
	)
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if dialed {
			return nil, errors.New("the connection to the proven admin API was closed; run the command again")
		}
		conn, err := d.DialContext(ctx, network, addr)
		dialed = err == nil
		return conn, err
	}
	tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost = 1, 1
	c.client.Transport = tr
	_, err := admin.VerifyListener(ctx, c.client, c.base.String(), c.token)
	switch {
	case errors.Is(err, admin.ErrNoProof):
		return &exitError{code: ExitInternal, err: fmt.Errorf("admin API %s: the listener did not prove it is the daemon holding the token from %s (%v); the token was not sent. Another program may have taken the daemon's address: check who listens there (ss -ltnp), or give --api and --token",
			redact.URL(c.base.String()), c.tokenSource(), err)}
	case err != nil:
		return c.explain(fmt.Errorf("admin API: %w (is \"leasehold run\" running with --http %s?)", err, c.base.Host))
	}
	c.proven = true
	return nil
}

// tokenSource says where a found token came from, for messages.
func (c *adminAPI) tokenSource() string {
	if c.tokenFile != "" {
		return c.tokenFile
	}
	return "the config"
}
