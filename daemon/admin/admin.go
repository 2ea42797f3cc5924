// Package admin serves a leasehold daemon's admin HTTP API, its OpenAPI
// document (/openapi.yaml) and the web dashboard (/).
//
// The API shows and acts on the daemon's own namespace only: its instances,
// leaders, locks, jobs and their runs. Listing goes through the backend
// (backend.Leases.List with the namespace's key prefix, the run ledger by the
// daemon's job names); actions go through the daemon's scheduler (Trigger,
// Pause, Resume, ResignLeadership).
//
// Access: the listener binds 127.0.0.1:7070 by default. Bearer tokens with a
// read or an admin scope are checked in constant time whenever any are
// configured (the daemon always configures one: it generates an admin token
// when none is given), and New refuses a listener that is not loopback
// without one. WithOpenReads lets the read routes answer without a token on
// loopback.
// TLS is served when a certificate and key are given. Failed attempts are
// logged without the token.
//
// Tokens travel in JSON as decimal strings (JavaScript numbers cannot hold
// every uint64). Errors are JSON objects {"error": "...", "field": "..."}
// naming the parameter and its value.
package admin

import (
	"context"
	"crypto/tls"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/backend"
	"github.com/leasehold/leasehold/schedule"
)

// DefaultAddress is where the admin API listens unless configured.
const DefaultAddress = "127.0.0.1:7070"

// Scheduler is what the server needs from the daemon's scheduler;
// *schedule.Scheduler implements it.
type Scheduler interface {
	Instance() string
	Namespace() string
	JobStatuses(next int) []schedule.JobStatus
	TriggerRun(ctx context.Context, job, key string) (schedule.Run, error)
	Pause(ctx context.Context, job string) error
	Resume(ctx context.Context, job string) error
	Paused(ctx context.Context, job string) (bool, error)
	Leadership() (leading bool, since time.Time, token leasehold.Token)
	ResignLeadership(ctx context.Context) (bool, error)
}

// Option configures a Server. Each validates its argument: New returns the
// first error, wrapping ErrConfigInvalid and naming the option and the value
// (never a token's secret).
type Option func(*config) error

type config struct {
	addr     string
	tokens   []Token
	certFile string
	keyFile  string
	logger   *slog.Logger
	mounts   []mount
	redactFn func(string) string
	maxConns int // 0: defaultMaxConns()
	openRead bool
}

// redact applies the WithRedaction function, if any.
func (c *config) redact(s string) string {
	if c.redactFn == nil {
		return s
	}
	return c.redactFn(s)
}

type mount struct {
	pattern string
	h       http.Handler
	scope   Scope // "" : open
}

// WithAddress sets the listen address host:port (default DefaultAddress).
func WithAddress(addr string) Option {
	return func(c *config) error {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("%w: WithAddress(%q): not host:port: %v", ErrConfigInvalid, addr, err)
		}
		c.addr = addr
		return nil
	}
}

// WithOpenReads lets the read-scope routes answer without a token (a token
// given is still checked for the actions). New refuses it on a listener that
// is not loopback.
func WithOpenReads() Option { return func(c *config) error { c.openRead = true; return nil } }

// WithTokens adds bearer tokens. Once any is configured, every API request
// needs one. A token's scope must be ScopeRead or ScopeAdmin and its
// secret at least MinTokenLen bytes without white space.
func WithTokens(ts ...Token) Option {
	return func(c *config) error {
		for i, t := range ts {
			if err := t.validate(len(c.tokens) + i); err != nil {
				return fmt.Errorf("%w: WithTokens: %w", ErrConfigInvalid, err)
			}
		}
		c.tokens = append(c.tokens, ts...)
		return nil
	}
}

// WithTLS serves HTTPS with the PEM certificate and key files; both must be
// given (New loads them).
func WithTLS(certFile, keyFile string) Option {
	return func(c *config) error {
		if certFile == "" || keyFile == "" {
			return fmt.Errorf("%w: WithTLS(%q, %q): TLS needs both a certificate and a key file", ErrConfigInvalid, certFile, keyFile)
		}
		c.certFile, c.keyFile = certFile, keyFile
		return nil
	}
}

// WithRedaction has f mask secrets in the run results and errors the API
// returns (history recorded before a secret was known to be one included).
// nil masks nothing.
func WithRedaction(f func(string) string) Option {
	return func(c *config) error { c.redactFn = f; return nil }
}

// WithLogger sets the logger (default: discard); it must not be nil.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil): the logger is nil", ErrConfigInvalid)
		}
		c.logger = l
		return nil
	}
}

// WithHandler mounts h at pattern (an http.ServeMux pattern such as
// "GET /healthz") next to the API, open to every client of the listener:
// for probes that reveal nothing.
func WithHandler(pattern string, h http.Handler) Option {
	return func(c *config) error {
		if pattern == "" || h == nil {
			return fmt.Errorf("%w: WithHandler(%q, %v): needs a pattern and a handler", ErrConfigInvalid, pattern, h)
		}
		c.mounts = append(c.mounts, mount{pattern: pattern, h: h})
		return nil
	}
}

// WithScopedHandler mounts h at pattern behind the API's bearer tokens:
// once any token is configured, a request needs one whose scope allows
// scope (e.g. ScopeRead for "GET /metrics").
func WithScopedHandler(pattern string, h http.Handler, scope Scope) Option {
	return func(c *config) error {
		switch {
		case pattern == "" || h == nil:
			return fmt.Errorf("%w: WithScopedHandler(%q, %v, %q): needs a pattern and a handler", ErrConfigInvalid, pattern, h, scope)
		case scope != ScopeRead && scope != ScopeAdmin:
			return fmt.Errorf("%w: WithScopedHandler(%q, …, %q): scope is not %q or %q", ErrConfigInvalid, pattern, scope, ScopeRead, ScopeAdmin)
		}
		c.mounts = append(c.mounts, mount{pattern: pattern, h: h, scope: scope})
		return nil
	}
}

// Server is the admin HTTP server of one daemon.
type Server struct {
	b       backend.Leases
	ledger  backend.Ledger
	sched   Scheduler
	cfg     config
	tokens  tokenSet
	tlsCert *tls.Certificate
	handler http.Handler
	seen    observations
	// runsSlots bounds the run-history reads served at once: each holds
	// up to a page of runs per job, output included, in memory.
	runsSlots chan struct{}
}

// New returns a server over the daemon's backend and scheduler. It
// validates the options: a listener that is not loopback without tokens is
// ErrListenerInsecure; bad tokens, addresses or TLS files are ErrConfigInvalid.
func New(b backend.Backend, sched Scheduler, opts ...Option) (*Server, error) {
	c := config{addr: DefaultAddress, logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrConfigInvalid)
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if b == nil || sched == nil || c.logger == nil {
		return nil, fmt.Errorf("%w: backend, scheduler and logger must not be nil", ErrConfigInvalid)
	}
	if _, _, err := net.SplitHostPort(c.addr); err != nil {
		return nil, fmt.Errorf("%w: address %q is not host:port: %v", ErrConfigInvalid, c.addr, err)
	}
	for i, t := range c.tokens {
		if err := t.validate(i); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfigInvalid, err)
		}
	}
	if !IsLoopback(c.addr) && c.openRead {
		return nil, fmt.Errorf("%w: open reads on address %q, which binds more than loopback", ErrListenerInsecure, c.addr)
	}
	if !IsLoopback(c.addr) && len(c.tokens) == 0 {
		return nil, fmt.Errorf("%w: address %q binds more than loopback; configure a token (http.tokens in the config, or $LEASEHOLD_ADMIN_TOKEN / $LEASEHOLD_READ_TOKEN), or listen on 127.0.0.1", ErrListenerInsecure, c.addr)
	}
	s := &Server{b: b, ledger: schedule.NamespaceLedger(b, sched.Namespace()), sched: sched, cfg: c, tokens: newTokenSet(c.tokens), runsSlots: make(chan struct{}, maxRunsReads)}
	if (c.certFile == "") != (c.keyFile == "") {
		return nil, fmt.Errorf("%w: TLS needs both a certificate and a key file (cert %q, key %q)", ErrConfigInvalid, c.certFile, c.keyFile)
	}
	if c.certFile != "" {
		cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: TLS cert %q / key %q: %v", ErrConfigInvalid, c.certFile, c.keyFile, err)
		}
		s.tlsCert = &cert
	}
	mux := http.NewServeMux()
	if err := s.register(mux); err != nil {
		return nil, err
	}
	s.handler = securityHeaders(mux)
	return s, nil
}

// contentSecurityPolicy: the dashboard loads its own script and style
// only, and no page may frame anything this server answers (clickjacking:
// a decoy page on another site framing the dashboard under a button).
const contentSecurityPolicy = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// securityHeaders sets, on every answer: a CSP with frame-ancestors 'none'
// and X-Frame-Options: DENY (for browsers without CSP level 2), nosniff
// (a JSON error is never run as a script) and no Referer to other sites.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", contentSecurityPolicy)
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

// Handler returns the server's HTTP handler (API, dashboard, OpenAPI
// document and mounted handlers).
func (s *Server) Handler() http.Handler { return s.handler }

// Listen opens the configured address, with TLS if configured.
func (s *Server) Listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", s.cfg.addr)
	if err != nil {
		return nil, fmt.Errorf("admin API: %w", err)
	}
	if s.tlsCert != nil {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*s.tlsCert}, MinVersion: tls.VersionTLS12})
	}
	return ln, nil
}

// TLS reports whether the server serves HTTPS.
func (s *Server) TLS() bool { return s.tlsCert != nil }

// Serve serves on ln until ctx ends, then shuts down within 5 s. It holds
// at most the WithMaxConnections cap of connections open and cuts off slow
// and idle clients (read 30 s, write 30 s, idle 30 s).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: s.handler, ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout, WriteTimeout: writeTimeout,
		IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes, ErrorLog: slog.NewLogLogger(s.cfg.logger.Handler(), slog.LevelWarn)}
	n := s.cfg.maxConns
	if n <= 0 {
		n = defaultMaxConns()
	}
	ll := newLimitListener(ln, n)
	hs.ConnState = ll.connState
	ln = ll
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close() // connections still active after 5 s are cut
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

//go:embed openapi.yaml
var openAPIDoc []byte

//go:embed dashboard
var dashboardFS embed.FS

func (s *Server) register(mux *http.ServeMux) (err error) {
	defer func() { // ServeMux panics on conflicting patterns
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: handler pattern: %v", ErrConfigInvalid, p)
		}
	}()
	methods := map[string][]string{}
	var paths []string
	for _, rt := range s.routes() {
		rt := rt
		mux.HandleFunc(rt.method+" "+rt.path, func(w http.ResponseWriter, r *http.Request) {
			if rt.scope != "" && (!s.checkOrigin(w, r) || !s.authorize(w, r, rt.scope)) {
				return
			}
			if rt.scope != "" {
				w.Header().Set("Cache-Control", "no-store")
			}
			rt.h(w, r)
		})
		if methods[rt.path] == nil {
			paths = append(paths, rt.path)
		}
		methods[rt.path] = append(methods[rt.path], rt.method)
	}
	// Known paths with another method: a JSON 405; unknown API paths: a
	// JSON 404.
	for _, p := range paths {
		ms := methods[p]
		for _, m := range ms {
			if m == "GET" { // a GET pattern serves HEAD too; nothing else does
				ms = append(ms, "HEAD")
				break
			}
		}
		allow := strings.Join(ms, ", ")
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, "method", fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow))
		})
	}
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "path", fmt.Sprintf("no API endpoint %s %s; see /openapi.yaml", r.Method, r.URL.Path))
	})
	for _, m := range s.cfg.mounts {
		if m.scope == "" {
			mux.Handle(m.pattern, m.h)
			continue
		}
		m := m
		mux.HandleFunc(m.pattern, func(w http.ResponseWriter, r *http.Request) {
			if !s.checkOrigin(w, r) || !s.authorize(w, r, m.scope) {
				return
			}
			m.h.ServeHTTP(w, r)
		})
	}
	return nil
}

func (s *Server) getOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(openAPIDoc)
}

func (s *Server) getDashboardFile(name string) http.HandlerFunc {
	types := map[string]string{".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
	return func(w http.ResponseWriter, _ *http.Request) {
		data, err := fs.ReadFile(dashboardFS, "dashboard/"+name)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "", err.Error())
			return
		}
		w.Header().Set("Content-Type", types[name[strings.LastIndex(name, "."):]])
		_, _ = w.Write(data)
	}
}

// apiError is the body of every error response.
type apiError struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// fieldError is a bad-input error naming its field.
type fieldError struct {
	field string
	msg   string
}

func (e *fieldError) Error() string { return e.field + ": " + e.msg }

func fieldErr(field, format string, args ...any) error {
	return &fieldError{field: field, msg: fmt.Sprintf(format, args...)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, field, msg string) {
	writeJSON(w, status, apiError{Error: msg, Field: field})
}

// writeFailure maps an error to a status: a *fieldError is 400, a backend
// ErrInvalid is 400, anything else is 502 (the backend failed).
func (s *Server) writeFailure(w http.ResponseWriter, r *http.Request, err error) {
	var fe *fieldError
	switch {
	case errors.As(err, &fe):
		writeError(w, http.StatusBadRequest, fe.field, fe.Error())
	case errors.Is(err, backend.ErrInvalid):
		writeError(w, http.StatusBadRequest, "", err.Error())
	default:
		s.cfg.logger.Error("admin API: backend request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeError(w, http.StatusBadGateway, "", "backend: "+err.Error())
	}
}

// observations remembers, for people, what this server saw: when it first
// saw each leader term and when it last saw each instance alive.
type observations struct {
	mu        sync.Mutex
	terms     map[string]termSeen // by role
	instances map[string]time.Time
}

type termSeen struct {
	token uint64
	since time.Time
}

const maxObserved = 1000

func (o *observations) termSince(role string, token uint64, now time.Time) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.terms == nil {
		o.terms = map[string]termSeen{}
	}
	if t, ok := o.terms[role]; ok && t.token == token {
		return t.since
	}
	if len(o.terms) >= maxObserved {
		clear(o.terms)
	}
	o.terms[role] = termSeen{token, now}
	return now
}

// instancesSeen records the live instances and returns every instance seen
// with when it was last seen alive, names sorted.
func (o *observations) instancesSeen(alive []string, now time.Time) (map[string]time.Time, []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.instances == nil {
		o.instances = map[string]time.Time{}
	}
	for _, n := range alive {
		o.instances[n] = now
	}
	for n, t := range o.instances {
		if now.Sub(t) > time.Hour || len(o.instances) > maxObserved {
			delete(o.instances, n)
		}
	}
	out := make(map[string]time.Time, len(o.instances))
	names := make([]string, 0, len(o.instances))
	for n, t := range o.instances {
		out[n] = t
		names = append(names, n)
	}
	sort.Strings(names)
	return out, names
}
