package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/daemon"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/internal/redact"
)

// apiFlags are the flags of the commands that talk to a daemon's admin API
// (status, trigger, pause, resume, resign).
type apiFlags struct {
	api, token, caFile, config string
}

// add registers the flags on cmd.
func (f *apiFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.api, "api", "http://"+admin.DefaultAddress, "admin API `URL` of a running daemon (with --config: its http.listen)")
	cmd.Flags().StringVar(&f.token, "token", "", "bearer `token` (default $"+EnvAPIToken+")")
	cmd.Flags().StringVar(&f.config, "config", "", "the daemon's config `file`: its http.listen, and the admin token it generated next to its database")
	cmd.Flags().StringVar(&f.caFile, "cacert", "", "PEM `file` of the CA (or self-signed certificate) to trust for https")
}

// apiHelp says how the API commands find the daemon and its token; it ends
// their Long help.
const apiHelp = `The token (--token, default $` + EnvAPIToken + `) is sent as a bearer token.
Without either, with --config, a token of the config's http.tokens (or of
$LEASEHOLD_ADMIN_TOKEN / $LEASEHOLD_READ_TOKEN, as the daemon reads them)
with the scope needed is sent; else the admin token a daemon generated is
read from its file: next to the SQLite database of --config's backend (or
of --backend, $LEASEHOLD_BACKEND or the default), as <database>.admin-token,
or leasehold.admin-token next to --config for other backends. A token is
never printed. A token found so (not given by --token or $` + EnvAPIToken + `)
is sent only after the listener proved it holds it (GET /api/v1/proof):
another program on the daemon's address gets nothing.

With --config and no --api, the API is the config's http.listen (https when
the config has tls_cert; the default address if it names none; 0.0.0.0 or ::
is reached on loopback), and the config's tls_cert is trusted for it. A
token from the config or the file is sent to that listener only: an --api
that is not the config's http.listen is refused unless the token comes from
--token or $` + EnvAPIToken + `. (When the config names no http.listen, the
daemon's --http is not known, and --api is taken as its address.)`

// adminAPI is a daemon's admin API as the command line reaches it.
type adminAPI struct {
	client    *http.Client
	base      *url.URL
	shown     string // base, for messages
	token     string // "" for none; never printed
	tokenFile string // where a generated token was looked for ("" if not)
	// mustProve: the token was found (the config's or the generated
	// one's file), not given; it is sent only after the listener proved
	// it holds it (see proveListener).
	mustProve, proven bool
}

// dialAdmin resolves the admin API and token from f (see apiHelp). It
// connects to nothing.
func (a *app) dialAdmin(cmd *cobra.Command, f *apiFlags, scope admin.Scope) (*adminAPI, error) {
	a.noteSecrets(f.api) // its userinfo, in whatever form an error repeats it
	c := &adminAPI{shown: redact.URL(f.api)}
	u, err := url.Parse(f.api)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageErrorf("--api %q: not an http(s) URL such as http://127.0.0.1:7070", c.shown)
	}
	var cfg *daemon.Config
	var listener *url.URL // the config's admin API, nil if unknown
	if f.config != "" {
		if cfg, err = a.loadConfig(cmd, f.config); err != nil {
			return nil, err
		}
		if listener, err = configListener(cfg); err != nil && !cmd.Flags().Changed("api") {
			return nil, usageErrorf("--config %s: %v; give --api", f.config, err)
		}
		if !cmd.Flags().Changed("api") {
			u, c.shown = listener, listener.String()
		}
	}
	c.base, c.token = u, f.token
	if c.token == "" {
		c.token = os.Getenv(EnvAPIToken)
	}
	if c.token == "" {
		from := ""
		if cfg != nil {
			if secret, ok := cfg.ConfiguredToken(scope); ok {
				c.token, from = secret, "the config's http.tokens or the daemon's environment"
			}
		}
		if c.token == "" {
			if c.token, c.tokenFile, err = a.generatedToken(cfg); err != nil {
				return nil, err
			}
			from = c.tokenFile
		}
		c.mustProve = c.token != ""
		// A token of the config goes to the config's listener only:
		// whoever else listens on --api must not receive it.
		if c.token != "" && cfg != nil && !sameListener(u, listener) && cfg.ListenNamed() {
			where := "its http.listen is unknown"
			if listener != nil {
				where = "it listens on " + listener.String()
			}
			return nil, usageErrorf("--api %s is not the admin API of --config %s (%s): the token from %s is sent to that API only; give --token or $%s to talk to another address",
				redact.URL(u.String()), f.config, where, from, EnvAPIToken)
		}
	}
	a.scrub = a.scrub.Add(c.token)
	c.client = &http.Client{Timeout: 30 * time.Second}
	switch {
	case f.caFile != "":
		pem, err := os.ReadFile(f.caFile)
		if err != nil {
			return nil, usageErrorf("--cacert: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usageErrorf("--cacert %q: no PEM certificate in it", f.caFile)
		}
		c.client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	case cfg != nil && cfg.HTTP.TLSCert != "" && u.Scheme == "https" && sameListener(u, listener):
		// The daemon's own certificate is trusted for its listener
		// (as well as the system's roots), if we may read it.
		if pem, err := os.ReadFile(cfg.HTTP.TLSCert); err == nil {
			pool, err := x509.SystemCertPool()
			if err != nil {
				pool = x509.NewCertPool()
			}
			if pool.AppendCertsFromPEM(pem) {
				c.client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
			}
		}
	}
	return c, nil
}

// call sends method to the API's path (segments already escaped) with
// query, and returns the body of a 2xx answer. Any other answer is an
// error carrying the API's message; errors show the API without its
// userinfo, and never the token.
func (c *adminAPI) call(ctx context.Context, method, path string, query url.Values) ([]byte, error) {
	target := strings.TrimSuffix(c.base.String(), "/") + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		return nil, fmt.Errorf("admin API %s: %w", redact.URL(c.base.String()), err)
	}
	if c.token != "" {
		if c.mustProve && !c.proven {
			if err := c.proveListener(ctx); err != nil {
				return nil, err
			}
		}
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, c.explain(fmt.Errorf("admin API: %w (is \"leasehold run\" running with --http %s?)", err, c.base.Host))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("admin API: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct{ Error string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return nil, c.explain(&apiError{status: resp.StatusCode, err: fmt.Errorf("admin API answered %s: %s", resp.Status, e.Error)})
		}
		return nil, c.explain(&apiError{status: resp.StatusCode, err: fmt.Errorf("admin API answered %s", resp.Status)})
	}
	return body, nil
}

// explain adds, when no token was found, where one was looked for.
func (c *adminAPI) explain(err error) error {
	if c.token != "" {
		return err
	}
	return fmt.Errorf("%w (no token: give --token or $%s, or --config of the daemon; no token file at %q)", err, EnvAPIToken, c.tokenFile)
}

// apiError is an answer of the admin API that is not a success.
type apiError struct {
	status int
	err    error
}

func (e *apiError) Error() string { return e.err.Error() }
func (e *apiError) Unwrap() error { return e.err }
