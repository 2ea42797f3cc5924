// Package redact hides secrets in URLs and in text that may repeat them,
// wherever leasehold prints, stores or returns a URL: the userinfo password
// and the values of credential-like query parameters (password, api_key,
// token, secret, sig, …) become "xxxxx".
package redact

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// Mask replaces every redacted value.
const Mask = "xxxxx"

// SensitiveName reports whether the name of a query parameter or header
// looks like it holds a credential (Authorization, api_key, X-Token, …).
func SensitiveName(name string) bool { return sensitive(name) }

// sensitive reports whether a query parameter's name looks like it holds a
// credential.
func sensitive(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"pass", "pwd", "secret", "token", "key", "auth", "sig", "credential", "session", "cookie"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// bareParam finds name=value pairs with credential-like names in text that
// is not a parsable URL.
var bareParam = regexp.MustCompile(`(?i)([A-Za-z0-9_.-]*(?:pass|pwd|secret|token|key|auth|sig|credential|session|cookie)[A-Za-z0-9_.-]*=)([^&\s"'` + "`" + `]+)`)

// userinfo finds the password of a URL's userinfo in text.
var userinfo = regexp.MustCompile(`(://[^/\s:@"']*:)([^@\s/"']+)(@)`)

// Text masks, in free text such as an error message, URL passwords
// (scheme://user:PASSWORD@) and credential-like name=value pairs.
func Text(s string) string {
	s = userinfo.ReplaceAllString(s, "${1}"+Mask+"${3}")
	return bareParam.ReplaceAllString(s, "${1}"+Mask)
}

// URL returns s with the userinfo password and the values of
// credential-like query parameters replaced by Mask. Something that does
// not parse as a URL has its credential-like name=value pairs masked.
func URL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		return bareParam.ReplaceAllString(s, "${1}"+Mask)
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), Mask)
	}
	if u.RawQuery != "" {
		parts := strings.Split(u.RawQuery, "&")
		for i, p := range parts {
			name, _, ok := strings.Cut(p, "=")
			if dn, err := url.QueryUnescape(name); err == nil {
				name = dn
			}
			if ok && sensitive(name) {
				parts[i] = p[:strings.IndexByte(p, '=')+1] + Mask
			}
		}
		u.RawQuery = strings.Join(parts, "&")
	}
	return u.String()
}

// Secrets returns the secret values in the URL s (its password and the
// values of its credential-like parameters, raw and unescaped), for a
// Replacer that scrubs text which may repeat them in another form.
func Secrets(s string) []string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		var out []string
		for _, m := range bareParam.FindAllStringSubmatch(s, -1) {
			out = append(out, m[2])
		}
		return out
	}
	var out []string
	if pw, ok := u.User.Password(); ok {
		out = append(out, pw, url.UserPassword("", pw).String()[1:]) // unescaped and as written
	}
	for _, p := range strings.Split(u.RawQuery, "&") {
		name, val, ok := strings.Cut(p, "=")
		if dn, err := url.QueryUnescape(name); err == nil {
			name = dn
		}
		if !ok || !sensitive(name) || val == "" {
			continue
		}
		out = append(out, val)
		if dv, err := url.QueryUnescape(val); err == nil {
			out = append(out, dv)
		}
	}
	return out
}

// Scrubber replaces known secret values in text.
type Scrubber struct {
	list []string
	r    *strings.Replacer
}

// NewScrubber returns a Scrubber of the secrets given; values shorter than
// 4 bytes are ignored (they would mask ordinary words).
func NewScrubber(secrets ...string) *Scrubber {
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
	return &Scrubber{list: list, r: strings.NewReplacer(pairs...)}
}

// Add returns a Scrubber that scrubs s's secrets and these.
func (s *Scrubber) Add(secrets ...string) *Scrubber {
	if s == nil {
		return NewScrubber(secrets...)
	}
	return NewScrubber(append(append([]string(nil), s.list...), secrets...)...)
}

// Text returns text with every secret masked.
func (s *Scrubber) Text(text string) string {
	if s == nil || s.r == nil {
		return text
	}
	return s.r.Replace(text)
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
