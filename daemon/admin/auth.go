package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Scope is what a bearer token allows.
type Scope string

const (
	// ScopeRead allows the GET endpoints.
	ScopeRead Scope = "read"
	// ScopeAdmin allows everything: the GET endpoints and the actions
	// (trigger, pause, resume, resign).
	ScopeAdmin Scope = "admin"
)

// MinTokenLen is the shortest bearer token accepted (bytes).
const MinTokenLen = 16

// Token is a bearer token and its scope.
type Token struct {
	Secret string
	Scope  Scope
}

// String hides the secret, so that a Token printed by mistake leaks nothing.
func (t Token) String() string {
	return fmt.Sprintf("Token{scope=%s, secret=[%d bytes]}", t.Scope, len(t.Secret))
}

func (t Token) validate(i int) error {
	switch {
	case t.Scope != ScopeRead && t.Scope != ScopeAdmin:
		return fieldErr(fmt.Sprintf("tokens[%d].scope", i), "%q is not %q or %q", t.Scope, ScopeRead, ScopeAdmin)
	case len(t.Secret) < MinTokenLen:
		// The secret itself is never printed.
		return fieldErr(fmt.Sprintf("tokens[%d].secret", i), "is %d bytes; at least %d are required", len(t.Secret), MinTokenLen)
	case strings.ContainsAny(t.Secret, " \t\r\n"):
		return fieldErr(fmt.Sprintf("tokens[%d].secret", i), "contains white space")
	}
	return nil
}

// allows reports whether a token of scope have may call a route needing need.
func (have Scope) allows(need Scope) bool { return have == ScopeAdmin || have == need }

// tokenSet compares presented tokens in constant time: every configured
// token is compared (by SHA-256, so lengths leak nothing), whatever matches.
type tokenSet struct {
	sums   [][sha256.Size]byte
	scopes []Scope
	ids    map[string]string // TokenID → secret, for the listener proof
}

func newTokenSet(ts []Token) tokenSet {
	var s tokenSet
	for _, t := range ts {
		s.sums = append(s.sums, sha256.Sum256([]byte(t.Secret)))
		s.scopes = append(s.scopes, t.Scope)
		if s.ids == nil {
			s.ids = map[string]string{}
		}
		s.ids[TokenID(t.Secret)] = t.Secret
	}
	return s
}

// byID returns the secret whose TokenID is id.
func (s tokenSet) byID(id string) (string, bool) {
	secret, ok := s.ids[id]
	return secret, ok
}

func (s tokenSet) empty() bool { return len(s.sums) == 0 }

// lookup returns the scope of the presented secret, or "".
func (s tokenSet) lookup(secret string) Scope {
	sum := sha256.Sum256([]byte(secret))
	var found Scope
	for i := range s.sums {
		if subtle.ConstantTimeCompare(sum[:], s.sums[i][:]) == 1 {
			found = s.scopes[i]
		}
	}
	return found
}

// authorize checks the request's bearer token against need. With no tokens
// configured (allowed on a loopback listener only) every request passes.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, need Scope) bool {
	if s.tokens.empty() || (need == ScopeRead && s.cfg.openRead) {
		return true
	}
	h := r.Header.Get("Authorization")
	scheme, secret, ok := strings.Cut(h, " ")
	refuse := func(status int, reason, msg string) bool {
		// Never the token: only why it was refused.
		s.cfg.logger.Warn("admin API: request refused", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "reason", reason)
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="leasehold"`)
		}
		writeError(w, status, "Authorization", msg)
		return false
	}
	switch {
	case h == "":
		return refuse(http.StatusUnauthorized, "no bearer token", "a bearer token is required (header Authorization: Bearer <token>)")
	case !ok || !strings.EqualFold(scheme, "Bearer") || secret == "":
		return refuse(http.StatusUnauthorized, "malformed Authorization header", "the Authorization header is not \"Bearer <token>\"")
	}
	scope := s.tokens.lookup(strings.TrimSpace(secret))
	switch {
	case scope == "":
		return refuse(http.StatusUnauthorized, "unknown token", "the bearer token is not valid")
	case !scope.allows(need):
		return refuse(http.StatusForbidden, "token scope "+string(scope)+" lacks "+string(need),
			fmt.Sprintf("the bearer token's scope %q does not allow this; it needs %q", scope, need))
	}
	return true
}

// checkOrigin guards against requests a web page on another site makes
// through the user's browser: an action (POST) whose Origin is not this
// server, scheme and host:port, is refused (cross-site request forgery; the
// scheme is the listener's own, so behind a proxy that terminates TLS a
// browser's https Origin is refused), and so is, when no token
// is configured, any request whose Host is not a loopback name (DNS
// rebinding: a hostile name resolving to 127.0.0.1).
func (s *Server) checkOrigin(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodPost {
		if o := r.Header.Get("Origin"); o != "" {
			scheme := "http"
			if r.TLS != nil {
				scheme = "https"
			}
			u, err := url.Parse(o)
			if err != nil || u.Host != r.Host || u.Scheme != scheme {
				s.cfg.logger.Warn("admin API: request refused", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "reason", "cross-origin action", "origin", o)
				writeError(w, http.StatusForbidden, "Origin", fmt.Sprintf("origin %q is not this server (%s://%s): cross-site actions are refused", o, scheme, r.Host))
				return false
			}
		}
	}
	if (s.tokens.empty() || s.cfg.openRead) && !IsLoopback(hostWithPort(r.Host)) {
		s.cfg.logger.Warn("admin API: request refused", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "reason", "non-loopback Host without tokens", "host", r.Host)
		writeError(w, http.StatusForbidden, "Host", fmt.Sprintf("host %q is not a loopback name; without tokens only localhost and loopback addresses are served", r.Host))
		return false
	}
	return true
}

func hostWithPort(h string) string {
	if _, _, err := net.SplitHostPort(h); err == nil {
		return h
	}
	if strings.Contains(h, ":") && !strings.HasPrefix(h, "[") { // a bare IPv6 address
		return "[" + h + "]:0"
	}
	return h + ":0"
}

// IsLoopback reports whether the listen address addr (host:port) binds a
// loopback interface only: "localhost" or a loopback IP. An empty host (all
// interfaces) is not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
