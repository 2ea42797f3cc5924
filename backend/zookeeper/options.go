package zookeeper

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/backend"
)

// Option configures Open and New over what the URL says (or, for New, over
// the defaults). Each sets one Config field and validates its argument: a
// bad one gives an error wrapping backend.ErrInvalid that names the option
// and the value. The whole Config is checked again when the backend is
// opened.
type Option func(*Config) error

// WithPrefix sets Config.Prefix, the root path of every node the backend
// writes (default "/leasehold").
func WithPrefix(p string) Option {
	return func(c *Config) error {
		if _, err := (&Config{Servers: []string{"x"}, Prefix: p}).check(); err != nil {
			return fmt.Errorf("WithPrefix(%q): %w", p, err)
		}
		c.Prefix = p
		return nil
	}
}

// WithSessionTimeout sets Config.SessionTimeout, the session timeout
// requested (default, and when 0, DefaultSessionTimeout; the server may
// grant another); it must not be negative.
func WithSessionTimeout(d time.Duration) Option {
	return func(c *Config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithSessionTimeout(%v): negative", backend.ErrInvalid, d)
		}
		c.SessionTimeout = d
		return nil
	}
}

// WithConnectTimeout sets Config.ConnectTimeout, the bound on establishing
// the session (default, and when 0, 10 s); it must not be negative.
func WithConnectTimeout(d time.Duration) Option {
	return func(c *Config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithConnectTimeout(%v): negative", backend.ErrInvalid, d)
		}
		c.ConnectTimeout = d
		return nil
	}
}

// WithDigestAuth sets Config.Username and Config.Password: the session
// authenticates with the digest scheme and every node is created with a
// digest ACL for that user only. The user must not be empty.
func WithDigestAuth(user, password string) Option {
	return func(c *Config) error {
		if user == "" {
			return fmt.Errorf("%w: WithDigestAuth(%q, …): empty username", backend.ErrInvalid, user)
		}
		c.Username, c.Password = user, password
		return nil
	}
}

// WithConnOptions adds go-zookeeper connection options (zk.WithDialer,
// zk.WithHostProvider, zk.WithMaxBufferSize, …) to the connection the
// backend makes. They are applied before the backend's own, so a
// zk.WithLogger among them is overridden: the backend's logger reads the
// session timeout the server granted, which go-zookeeper reports nowhere
// else. A zk.WithDialer among them replaces the backend's dialer, which
// bounds the session handshake by the session timeout (go-zookeeper's own
// waits 20/3 of it for a server that accepted and does not answer).
func WithConnOptions(opts ...func(*zk.Conn)) Option {
	return func(c *Config) error {
		for i, o := range opts {
			if o == nil {
				return fmt.Errorf("%w: WithConnOptions: option %d is nil", backend.ErrInvalid, i)
			}
		}
		c.ConnOptions = append(c.ConnOptions, opts...)
		return nil
	}
}

// New connects to servers as opts say and returns a backend over that
// connection, which it owns: Close closes it.
//
// Unlike the other backends' New, it takes no connection the caller made
// and keeps: a lock here is an ephemeral node of the backend's session, and
// only closing the session ends at once every node the backend created or
// may have created (those of requests whose outcome is unknown too); and
// lease TTLs are capped by the session timeout the server granted, which
// go-zookeeper reports only to the logger the connection was made with. A
// connection the caller shares could give neither, so the caller shapes
// the connection with WithConnOptions instead.
func New(ctx context.Context, servers []string, opts ...Option) (*Backend, error) {
	return Config{Servers: servers}.open(ctx, opts)
}

// open applies opts to cfg (a nil one is refused) and opens it.
func (cfg Config) open(ctx context.Context, opts []Option) (*Backend, error) {
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil zookeeper option", backend.ErrInvalid)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return OpenConfig(ctx, cfg)
}

// check validates cfg and fills in its defaults; it returns the normalised
// prefix.
func (cfg *Config) check() (string, error) {
	if len(cfg.Servers) == 0 {
		return "", fmt.Errorf("%w: zookeeper servers are empty", backend.ErrInvalid)
	}
	for _, s := range cfg.Servers {
		if s == "" {
			return "", fmt.Errorf("%w: zookeeper servers %q include an empty address", backend.ErrInvalid, cfg.Servers)
		}
	}
	if strings.Trim(cfg.Prefix, "/") == "" && cfg.Prefix != "" { // "/", "//": not the default by accident
		return "", fmt.Errorf("%w: zookeeper prefix %q is the root; give a path such as /leasehold (empty for the default)", backend.ErrInvalid, cfg.Prefix)
	}
	p := strings.TrimSuffix(cfg.Prefix, "/")
	if p == "" {
		p = "/leasehold"
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", fmt.Errorf("%w: zookeeper prefix %q: path segment %q is not allowed", backend.ErrInvalid, cfg.Prefix, seg)
		}
	}
	switch {
	case cfg.SessionTimeout < 0:
		return "", fmt.Errorf("%w: zookeeper session timeout %v is negative", backend.ErrInvalid, cfg.SessionTimeout)
	case cfg.SessionTimeout == 0:
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	switch {
	case cfg.ConnectTimeout < 0:
		return "", fmt.Errorf("%w: zookeeper connect timeout %v is negative", backend.ErrInvalid, cfg.ConnectTimeout)
	case cfg.ConnectTimeout == 0:
		cfg.ConnectTimeout = 10 * time.Second
	}
	for i, o := range cfg.ConnOptions {
		if o == nil {
			return "", fmt.Errorf("%w: zookeeper connection option %d is nil", backend.ErrInvalid, i)
		}
	}
	if cfg.Username == "" && cfg.Password != "" {
		return "", fmt.Errorf("%w: zookeeper password given without a username", backend.ErrInvalid)
	}
	return p, nil
}
