// Package redact hides secrets in URLs and in text that may repeat them,
// wherever leasehold prints, stores or returns a URL: the userinfo password,
// the user name of an http(s)/ws(s) URL that has no password (a token given
// as the user name), and the values of credential-like query and fragment
// parameters (password, api_key, token, secret, sig, code, …) become
// "xxxxx".
package redact

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
)

// Mask replaces every redacted value.
const Mask = "xxxxx"

// credentialWords are the parts of a parameter's or header's name that make
// it credential-like, anywhere in the name and in any case.
var credentialWords = []string{"pass", "pwd", "secret", "token", "key", "auth", "sig", "credential", "session", "cookie"}

// credentialNames are names that are credential-like only as a whole (in
// any case): "code" is the key of an Azure Functions HTTP trigger and an
// OAuth authorization code, but "postcode" or "status_code" are not secrets.
var credentialNames = []string{"code"}

// SensitiveName reports whether the name of a query parameter or header
// looks like it holds a credential (Authorization, api_key, X-Token, code,
// …).
func SensitiveName(name string) bool { return sensitive(name) }

// sensitive reports whether a query parameter's name looks like it holds a
// credential.
func sensitive(name string) bool {
	n := strings.ToLower(name)
	for _, w := range credentialWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	for _, w := range credentialNames {
		if n == w {
			return true
		}
	}
	return false
}

// bareParam finds name=value pairs with credential-like names in text that
// is not a parsable URL. Group 1 is everything up to the '=' (for "code", the
// character before the name as well), group 2 the value.
var bareParam = regexp.MustCompile(`(?i)((?:^|[^A-Za-z0-9_.-])(?:` + strings.Join(credentialNames, "|") + `)=|[A-Za-z0-9_.-]*(?:` + strings.Join(credentialWords, "|") + `)[A-Za-z0-9_.-]*=)([^&\s"'` + "`" + `]+)`)

// hostPart is what follows the '@' that ends a URL's userinfo in text: a
// host (name, IPv4, [IPv6]) and port, then the end of the authority.
const hostPart = `(@[A-Za-z0-9._~%\[\]:-]*(?:[/?#\s"'<>]|$))`

// userinfo finds the password of a URL's userinfo in text: everything from
// "scheme://user:" to the last '@' (before any '?' or '#') that is followed
// by a host part, so that a password holding '/' or '@' (which makes the URL
// unparsable) is masked whole.
var userinfo = regexp.MustCompile(`(://[^/\s:@"'<>]*:)([^\s"'<>?#]*)` + hostPart)

// portThenPath matches what userinfo takes for a password when it is a port
// and a path that holds an '@' (http://host:8080/users/@me).
var portThenPath = regexp.MustCompile(`^[0-9]{1,5}/`)

// webUser finds the user name of an http(s) or ws(s) URL's userinfo that
// has no password, in text: such URLs take a token as the user name
// (https://TOKEN@api.github.com).
var webUser = regexp.MustCompile(`(?i)(\b(?:https?|wss?)://)([^/\s:@"'<>?#]+)` + hostPart)

// webScheme reports whether a URL of this scheme that has a user name but
// no password holds a credential in the user name: for http(s) and ws(s)
// it is a token (GitHub, GitLab, npm, Bitbucket take one so); for other
// schemes (postgres://leasehold@host/db) it is a user name and is kept.
func webScheme(scheme string) bool {
	switch strings.ToLower(scheme) {
	case "http", "https", "ws", "wss":
		return true
	}
	return false
}

// Text masks, in free text such as an error message, URL passwords
// (scheme://user:PASSWORD@, a password with '/' or '@' included), the user
// name of an http(s) URL without a password (https://TOKEN@host) and
// credential-like name=value pairs.
func Text(s string) string {
	s = userinfo.ReplaceAllStringFunc(s, func(m string) string {
		g := userinfo.FindStringSubmatch(m)
		if portThenPath.MatchString(g[2]) {
			return m // scheme://host:8080/path/@name: a port, not a password
		}
		return g[1] + Mask + g[3]
	})
	s = webUser.ReplaceAllString(s, "${1}"+Mask+"${3}")
	return bareParam.ReplaceAllString(s, "${1}"+Mask)
}

// maskParams masks the values of the credential-like name=value pairs of a
// raw query or fragment.
func maskParams(raw string) string {
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		name, _, ok := strings.Cut(p, "=")
		if dn, err := url.QueryUnescape(name); err == nil {
			name = dn
		}
		if ok && sensitive(name) {
			parts[i] = p[:strings.IndexByte(p, '=')+1] + Mask
		}
	}
	return strings.Join(parts, "&")
}

// URL returns s with the userinfo password, the user name of an http(s)
// URL without a password, and the values of credential-like query and
// fragment parameters replaced by Mask. Something that does not parse as
// a URL is masked as Text.
func URL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		// Unparsable: maybe for a raw password with a character that
		// ends a URL's userinfo ('#', '?', '/'), which Text's pattern
		// would then not find.
		return Text(maskRawUserinfo(s))
	}
	if u.Scheme == "" {
		return Text(s)
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), Mask)
	} else if u.User != nil && u.User.Username() != "" && webScheme(u.Scheme) {
		u.User = url.User(Mask)
	}
	if u.RawQuery != "" {
		u.RawQuery = maskParams(u.RawQuery)
	}
	frag := ""
	if u.Fragment != "" || u.RawFragment != "" {
		// A fragment is not sent, but OAuth's implicit flow and
		// single-page apps carry tokens there (#access_token=…, or
		// #/cb?access_token=…): mask its credential-like pairs as text.
		frag = "#" + bareParam.ReplaceAllString(u.EscapedFragment(), "${1}"+Mask)
		u.Fragment, u.RawFragment = "", ""
	}
	return u.String() + frag
}

// Secrets returns the secret values in the URL s (its password, the user
// name of an http(s) URL without a password, and the values of its
// credential-like query and fragment parameters, raw and unescaped), for a
// Replacer that scrubs text which may repeat them in another form.
func Secrets(s string) []string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		var out []string
		if _, pw, ok := rawUserinfo(s); ok && pw != "" && err != nil {
			out = append(out, pw)
		}
		for _, m := range userinfo.FindAllStringSubmatch(s, -1) {
			out = append(out, m[2])
		}
		for _, m := range webUser.FindAllStringSubmatch(s, -1) {
			out = append(out, m[2])
		}
		for _, m := range bareParam.FindAllStringSubmatch(s, -1) {
			out = append(out, m[2])
		}
		return out
	}
	var out []string
	if pw, ok := u.User.Password(); ok {
		out = append(out, pw, url.UserPassword("", pw).String()[1:]) // unescaped and as written
	} else if u.User != nil && u.User.Username() != "" && webScheme(u.Scheme) {
		out = append(out, u.User.Username(), u.User.String()) // unescaped and as written
	}
	params := func(raw string, unescape func(string) (string, error)) {
		for _, p := range strings.Split(raw, "&") {
			name, val, ok := strings.Cut(p, "=")
			if dn, err := unescape(name); err == nil {
				name = dn
			}
			if i := strings.LastIndexAny(name, "/?"); i >= 0 { // #/cb?access_token=…
				name = name[i+1:]
			}
			if !ok || !sensitive(name) || val == "" {
				continue
			}
			out = append(out, val)
			if dv, err := unescape(val); err == nil {
				out = append(out, dv)
			}
		}
	}
	params(u.RawQuery, url.QueryUnescape)
	if u.Fragment != "" {
		params(u.EscapedFragment(), url.PathUnescape)
		params(u.Fragment, func(s string) (string, error) { return s, nil })
	}
	return out
}

// Scrubber replaces known secret values in text. It is safe for concurrent
// use, Grow included.
type Scrubber struct {
	st atomic.Pointer[scrubState]
}

type scrubState struct {
	list []string
	r    *strings.Replacer
}

// NewScrubber returns a Scrubber of the secrets given; values shorter than
// 4 bytes are ignored (they would mask ordinary words).
func NewScrubber(secrets ...string) *Scrubber {
	s := &Scrubber{}
	s.st.Store(newScrubState(secrets))
	return s
}

func newScrubState(secrets []string) *scrubState {
	seen := map[string]bool{}
	var list []string
	for _, s := range secrets {
		if len(s) >= 4 && !seen[s] {
			seen[s] = true
			list = append(list, s)
		}
	}
	sort.Slice(list, func(i, j int) bool { return len(list[i]) > len(list[j]) }) // longest first
	var pairs []string
	for _, s := range list {
		pairs = append(pairs, s, Mask)
	}
	return &scrubState{list: list, r: strings.NewReplacer(pairs...)}
}

func (s *Scrubber) secrets() []string {
	if s == nil {
		return nil
	}
	if st := s.st.Load(); st != nil {
		return st.list
	}
	return nil
}

// Add returns a Scrubber that scrubs s's secrets and these.
func (s *Scrubber) Add(secrets ...string) *Scrubber {
	return NewScrubber(append(append([]string(nil), s.secrets()...), secrets...)...)
}

// Grow adds secrets to s itself, so that every holder of s (a log handler,
// an error wrapper) masks them from now on. Secrets are never removed.
func (s *Scrubber) Grow(secrets ...string) {
	for {
		old := s.st.Load()
		var have []string
		if old != nil {
			have = old.list
		}
		if s.st.CompareAndSwap(old, newScrubState(append(append([]string(nil), have...), secrets...))) {
			return
		}
	}
}

// Merge adds o's secrets to s itself, as Grow does.
func (s *Scrubber) Merge(o *Scrubber) { s.Grow(o.secrets()...) }

// Text returns text with every secret masked.
func (s *Scrubber) Text(text string) string {
	if s == nil {
		return text
	}
	st := s.st.Load()
	if st == nil || st.r == nil {
		return text
	}
	return st.r.Replace(text)
}

// Handler wraps h so that every record's message and attribute values
// (strings, errors, anything printed with %v) have the secrets masked.
func Handler(h slog.Handler, s *Scrubber) slog.Handler { return &handler{h: h, s: s} }

type handler struct {
	h slog.Handler
	s *Scrubber
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.s.Text(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.h.Handle(ctx, out)
}

func (h *handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.s.Text(v.String()))
	case slog.KindGroup:
		var as []any
		for _, g := range v.Group() {
			as = append(as, h.attr(g))
		}
		return slog.Group(a.Key, as...)
	case slog.KindAny:
		return slog.String(a.Key, h.s.Text(fmt.Sprint(v.Any())))
	}
	return slog.Attr{Key: a.Key, Value: v}
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = h.attr(a)
	}
	return &handler{h: h.h.WithAttrs(out), s: h.s}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{h: h.h.WithGroup(name), s: h.s}
}

// Error wraps err so that its message has the secrets masked; errors.Is
// and errors.As still see err.
func Error(err error, s *Scrubber) error {
	if err == nil {
		return nil
	}
	msg := s.Text(err.Error())
	if msg == err.Error() {
		return err
	}
	return &scrubbed{err: err, msg: msg}
}

type scrubbed struct {
	err error
	msg string
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// ParseReason returns why url.Parse refused a URL, without the URL and
// without the part of it the reason quotes: url's errors repeat the raw URL
// and quote where they stumbled ("invalid port \":hunter2\" after host",
// "invalid URL escape \"%zz\""), and with a password pasted raw (a '/',
// '?', '#' or '%' in it) that part is the password's start. An invalid
// port names the likely cause.
func ParseReason(err error) string {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return "unparsable"
	}
	reason := strings.Join(strings.Fields(quotedPart.ReplaceAllString(ue.Err.Error(), "")), " ")
	if strings.HasPrefix(reason, "invalid port") {
		reason += ": a character such as / ? # @ in a password must be percent-encoded"
	}
	return reason
}

// quotedPart is a quoted string in an error of net/url.
var quotedPart = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// rawUserinfo splits what lies between a URL's "://" and its last '@' (a
// raw password may hold any character but that '@' ends it) into user and
// password, if there is such a part.
func rawUserinfo(s string) (user, password string, ok bool) {
	i := strings.Index(s, "://")
	if i < 0 {
		return "", "", false
	}
	rest := s[i+3:]
	j := strings.LastIndex(rest, "@")
	if j < 0 {
		return "", "", false
	}
	user, password, _ = strings.Cut(rest[:j], ":")
	return user, password, true
}

// maskRawUserinfo masks the password of an unparsable URL's userinfo (all
// of it when it has no ':'), found by rawUserinfo.
func maskRawUserinfo(s string) string {
	user, pw, ok := rawUserinfo(s)
	if !ok {
		return s
	}
	i := strings.Index(s, "://") + 3
	j := i + strings.LastIndex(s[i:], "@")
	if pw == "" && !strings.Contains(s[i:j], ":") {
		return s[:i] + Mask + s[j:]
	}
	return s[:i] + user + ":" + Mask + s[j:]
}
