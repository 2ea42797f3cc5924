package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/leasehold/leasehold/daemon/admin"
)

// Environment variables that add bearer tokens to the admin API (in
// addition to http.tokens in the config).
const (
	EnvAdminToken = "LEASEHOLD_ADMIN_TOKEN" // scope admin
	EnvReadToken  = "LEASEHOLD_READ_TOKEN"  // scope read
)

// HTTPConfig configures the admin HTTP API and dashboard.
type HTTPConfig struct {
	// Listen is host:port (default 127.0.0.1:7070), or "off". When the
	// default address is taken (several daemons on one host), a daemon
	// with configured tokens logs a warning and runs without the API; one
	// using the admin token it generated does so only if the listener
	// there proves it holds that token (another daemon on the same
	// database), and otherwise stops with an error (the token is usable
	// only through the API); an address given explicitly must be free.
	Listen  string        `yaml:"listen"`
	TLSCert string        `yaml:"tls_cert"` // PEM file; with tls_key, serve HTTPS
	TLSKey  string        `yaml:"tls_key"`
	Tokens  []TokenConfig `yaml:"tokens"`
	// OpenReads lets the GET endpoints answer without a token on a
	// loopback listener; actions still need an admin token.
	OpenReads bool `yaml:"open_reads"`

	explicit bool // Listen came from the config or the command line
}

// TokenConfig is one bearer token: the secret itself (token) or the name
// of an environment variable holding it (token_env), and its scope.
type TokenConfig struct {
	Scope    string `yaml:"scope"` // read or admin
	Token    string `yaml:"token"`
	TokenEnv string `yaml:"token_env"`
}

// LogConfig configures the daemon's log.
type LogConfig struct {
	Format string `yaml:"format"` // text (default) or json
	Level  string `yaml:"level"`  // debug, info (default), warn, error
}

// HTTPOff disables the admin API when given as http.listen or --http.
const HTTPOff = "off"

// ListenNamed reports whether the admin API's address was named — by
// http.listen in the config or by SetListen — rather than defaulted.
func (c *Config) ListenNamed() bool { return c.HTTP.explicit }

// SetListen sets the admin API's address from the command line.
func (c *Config) SetListen(addr string) {
	c.HTTP.Listen, c.HTTP.explicit = addr, true
}

// validateHTTP fills the http and log defaults and returns every error.
func (c *Config) validateHTTP() []error {
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	h := &c.HTTP
	if h.Listen == "" {
		h.Listen = admin.DefaultAddress
	} else {
		h.explicit = true
	}
	for i, t := range h.Tokens {
		f := func(name string) string { return fmt.Sprintf("http.tokens[%d].%s", i, name) }
		if t.Scope != string(admin.ScopeRead) && t.Scope != string(admin.ScopeAdmin) {
			add(c.errf(f("scope"), "%q is not read or admin", t.Scope))
		}
		if (t.Token == "") == (t.TokenEnv == "") {
			add(c.errf(f("token"), "give exactly one of token and token_env"))
		}
		if t.Token != "" && len(t.Token) < admin.MinTokenLen {
			add(c.errf(f("token"), "is %d bytes; at least %d are required", len(t.Token), admin.MinTokenLen))
		}
	}
	if h.OpenReads && h.Listen != HTTPOff && !admin.IsLoopback(h.Listen) {
		add(c.errf("http.open_reads", "true with listen %q: reads may be open on a loopback listener only", h.Listen))
	}
	if (h.TLSCert == "") != (h.TLSKey == "") {
		add(c.errf("http", "tls_cert %q and tls_key %q: give both or neither", h.TLSCert, h.TLSKey))
	}
	// Relative files are next to the config file, whatever the daemon's
	// working directory.
	for _, p := range []*string{&h.TLSCert, &h.TLSKey} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(filepath.Dir(absPath(c.path)), *p)
		}
	}
	switch strings.ToLower(c.Log.Format) {
	case "", "text", "json":
	default:
		add(c.errf("log.format", "%q is not text or json", c.Log.Format))
	}
	if _, err := parseLevel(c.Log.Level); err != nil {
		add(c.errf("log.level", "%v", err))
	}
	return errs
}

// adminTokens resolves the configured tokens and the environment's.
func (c *Config) adminTokens() ([]admin.Token, error) {
	var out []admin.Token
	for i, t := range c.HTTP.Tokens {
		secret := t.Token
		if t.TokenEnv != "" {
			secret = os.Getenv(t.TokenEnv)
			if secret == "" {
				return nil, c.errf(fmt.Sprintf("http.tokens[%d].token_env", i), "environment variable %q is empty or unset", t.TokenEnv)
			}
		}
		out = append(out, admin.Token{Secret: secret, Scope: admin.Scope(t.Scope)})
	}
	for env, scope := range map[string]admin.Scope{EnvAdminToken: admin.ScopeAdmin, EnvReadToken: admin.ScopeRead} {
		if v := os.Getenv(env); v != "" {
			if len(v) < admin.MinTokenLen {
				return nil, fmt.Errorf("%w: $%s is %d bytes; at least %d are required", ErrConfigInvalid, env, len(v), admin.MinTokenLen)
			}
			out = append(out, admin.Token{Secret: v, Scope: scope})
		}
	}
	return out, nil
}

// ConfiguredToken returns a bearer token of the daemon's config that
// allows scope — from http.tokens or the environment ($LEASEHOLD_ADMIN_TOKEN,
// $LEASEHOLD_READ_TOKEN), an admin token for either scope — for a client
// such as "leasehold status" that was given the config. ok is false if
// the config has none (the daemon then generates one: AdminTokenFile).
func (c *Config) ConfiguredToken(scope admin.Scope) (secret string, ok bool) {
	ts, err := c.adminTokens()
	if err != nil {
		return "", false
	}
	for _, want := range []admin.Scope{scope, admin.ScopeAdmin} {
		for _, t := range ts {
			if t.Scope == want {
				return t.Secret, true
			}
		}
	}
	return "", false
}

func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "", "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%q is not debug, info, warn or error", s)
}

// NewLogger returns a logger for the daemon writing to w in format ("text"
// or "json") at level ("debug", "info", "warn", "error"; "" = info). New
// adds the instance id to every line.
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	lv, err := parseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("%w: log level %v", ErrConfigInvalid, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	switch strings.ToLower(format) {
	case "", "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("%w: log format %q is not text or json", ErrConfigInvalid, format)
	}
	return slog.New(h), nil
}
