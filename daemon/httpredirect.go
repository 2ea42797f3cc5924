package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// Values of an HTTP job's redirects.
const (
	RedirectsSameOrigin = "same_origin" // the default
	RedirectsNone       = "none"
	RedirectsAny        = "any"
)

// maxRedirects bounds a chain of redirects, as net/http's default does.
const maxRedirects = 10

// errRedirectRefused: a redirect the job's policy does not follow.
var errRedirectRefused = errors.New("redirect refused")

// redirectClient returns client with the redirect policy of h: a redirect
// is followed only as h.Redirects allows; no redirect carries a Referer
// (it would repeat the URL, query secrets included); and a redirect to
// another origin (scheme, host or port) carries none of the job's own
// headers (net/http drops only Authorization, Cookie and
// WWW-Authenticate, and only for another domain: X-Api-Key would go along).
func redirectClient(client *http.Client, h *HTTPJob) *http.Client {
	c := *client
	policy := h.Redirects
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		req.Header.Del("Referer")
		first := via[0].URL
		switch {
		case len(via) >= maxRedirects:
			return fmt.Errorf("%w: stopped after %d redirects", errRedirectRefused, maxRedirects)
		case policy == RedirectsNone:
			return fmt.Errorf("%w: the job's redirects is %q (to %s)", errRedirectRefused, RedirectsNone, redactURL(req.URL.String()))
		case sameOrigin(first, req.URL):
			return nil
		case policy != RedirectsAny:
			return fmt.Errorf("%w: %s is another origin than %s (set the job's http.redirects: any to follow it, without the job's headers)",
				errRedirectRefused, redactURL(req.URL.String()), redactURL(first.Scheme+"://"+first.Host))
		}
		for k := range h.Headers {
			req.Header.Del(k)
		}
		for _, k := range []string{"Authorization", "Cookie", "Proxy-Authorization"} {
			req.Header.Del(k)
		}
		return nil
	}
	return &c
}

// sameOrigin reports whether a and b have the same scheme, host and port.
func sameOrigin(a, b *url.URL) bool {
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if u.Scheme == "https" {
			return "443"
		}
		return "80"
	}
	return a.Scheme == b.Scheme && a.Hostname() == b.Hostname() && port(a) == port(b)
}
