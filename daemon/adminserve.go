package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/daemon/admin"
	"github.com/leasehold/leasehold/schedule"
)

func (d *Daemon) newAdmin(cfg *Config, b backend.Backend, sched *schedule.Scheduler, log *slog.Logger, extra []admin.Option) (*admin.Server, error) {
	tokens, err := cfg.adminTokens()
	if err != nil {
		return nil, err
	}
	// Actions need a token by default: with no admin token configured, the
	// daemon uses one it generated into a 0600 file (next to the database
	// for SQLite, else next to the config), which "leasehold status" reads.
	hasAdmin := false
	for _, t := range tokens {
		hasAdmin = hasAdmin || t.Scope == admin.ScopeAdmin
	}
	// Only on a loopback listener: one that is not needs configured tokens.
	if !hasAdmin && admin.IsLoopback(cfg.HTTP.Listen) {
		path := cfg.AdminTokenFile()
		if path == "" {
			return nil, fmt.Errorf("%w: http: no admin token configured and no place for a generated one (no config file, backend not SQLite): set http.tokens or $%s", ErrConfigInvalid, EnvAdminToken)
		}
		secret, created, err := loadOrCreateToken(path)
		if err != nil {
			return nil, err
		}
		d.tokenFile, d.tokenSecret, d.tokenCreated = path, secret, created
		tokens = append(tokens, admin.Token{Secret: secret, Scope: admin.ScopeAdmin})
		if created {
			log.Info("generated the admin API token (it is not logged)", "file", path)
		} else {
			log.Info("admin API token read", "file", path)
		}
	}
	opts := []admin.Option{admin.WithAddress(cfg.HTTP.Listen), admin.WithTokens(tokens...), admin.WithLogger(log)}
	if cfg.HTTP.OpenReads {
		opts = append(opts, admin.WithOpenReads())
	}
	if cfg.HTTP.TLSCert != "" {
		opts = append(opts, admin.WithTLS(cfg.HTTP.TLSCert, cfg.HTTP.TLSKey))
	}
	srv, err := admin.New(b, sched, append(opts, extra...)...)
	if errors.Is(err, admin.ErrListenerInsecure) || errors.Is(err, admin.ErrConfigInvalid) {
		return nil, fmt.Errorf("%w: %s: http: %w", ErrConfigInvalid, cfg.path, err)
	}
	return srv, err
}

// serveAdmin starts the admin API; the returned function stops it. When the
// default address is taken, it fails if the daemon uses a generated (or
// file) admin token — usable only through this API — and otherwise logs a
// warning and serves nothing.
func (d *Daemon) serveAdmin() (stop func(), err error) {
	if d.admin == nil {
		return func() {}, nil
	}
	ln, err := d.admin.Listen()
	if errors.Is(err, syscall.EADDRINUSE) && !d.cfg.HTTP.explicit && d.tokenFile != "" {
		// The token in tokenFile is usable only through the API. Another
		// daemon holding it (several on one database and host) serves
		// it there; any other process holding the address (another
		// user's, perhaps) would receive what clients send there.
		if perr := d.siblingHoldsToken(); perr != nil {
			return nil, fmt.Errorf("%w: admin API: the default address %s is taken by a process that did not prove it is a daemon holding the admin token in %s (%v), and that token is usable only through this API: set http.listen or --http (e.g. 127.0.0.1:0, or off), or find who listens there (ss -ltnp): %w",
				ErrConfigInvalid, d.cfg.HTTP.Listen, d.tokenFile, perr, err)
		}
		d.log.Warn("admin API not started: its default address is served by another daemon holding the same admin token (set http.listen or --http, e.g. 127.0.0.1:0, to serve this one's)", "addr", d.cfg.HTTP.Listen)
		return func() {}, nil
	}
	if errors.Is(err, syscall.EADDRINUSE) && !d.cfg.HTTP.explicit {
		d.log.Warn("admin API not started: its default address is in use (set http.listen or --http, e.g. 127.0.0.1:0)", "addr", d.cfg.HTTP.Listen)
		return func() {}, nil
	}
	if err != nil {
		return nil, err
	}
	d.adminMu.Lock()
	d.adminAddr = ln.Addr()
	d.adminMu.Unlock()
	scheme := "http"
	if d.admin.TLS() {
		scheme = "https"
	}
	d.log.Info("admin API and dashboard listening", "url", scheme+"://"+ln.Addr().String()+"/", "open_reads", d.cfg.HTTP.OpenReads)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.admin.Serve(ctx, ln); err != nil {
			d.log.Error("admin API stopped", "err", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}

// siblingHoldsToken asks the listener on the admin address to prove it
// holds this daemon's admin token (admin.VerifyListener): nil if it does.
func (d *Daemon) siblingHoldsToken() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	scheme := "http"
	tr := &http.Transport{}
	if d.admin.TLS() {
		// The HMAC proof authenticates the listener; its certificate
		// (perhaps self-signed) need not.
		scheme, tr.TLSClientConfig = "https", &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // authenticated by the proof
	}
	defer tr.CloseIdleConnections()
	host, port, err := net.SplitHostPort(d.cfg.HTTP.Listen)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	_, err = admin.VerifyListener(ctx, &http.Client{Transport: tr}, scheme+"://"+net.JoinHostPort(host, port), d.tokenSecret)
	return err
}

// AdminToken returns the admin token the daemon generated or read from its
// token file (see AdminTokenFile), and whether this daemon created the file;
// all "" and false when an admin token is configured or the API is off.
func (d *Daemon) AdminToken() (path, secret string, created bool) {
	return d.tokenFile, d.tokenSecret, d.tokenCreated
}

// Ready is closed once Run holds the instance id, has started the scheduler
// and the admin API listens (if it does).
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

// AdminAddr returns the admin API's listen address once Ready, or nil if it
// does not listen.
func (d *Daemon) AdminAddr() net.Addr {
	d.adminMu.Lock()
	defer d.adminMu.Unlock()
	return d.adminAddr
}
