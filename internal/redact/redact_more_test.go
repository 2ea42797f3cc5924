package redact

import (
	"strings"
	"testing"
)

// URL keeps a userinfo that has no password (a token given as the
// user name, as GitHub/GitLab/npm URLs take it) and credential-like
// parameters in the fragment (OAuth implicit-flow access_token); Secrets
// does not list them either, so no Scrubber masks them (promise 2: URL
// userinfo and credential-like params never appear).
func TestUserinfoWithoutPasswordAndFragment(t *testing.T) {
	for _, c := range []struct{ in, secret string }{
		{"https://ghp_Review0123456789abcdef@api.github.com/repos/o/r/dispatches", "ghp_Review0123456789abcdef"},
		{"https://hooks.example.com/cb#access_token=fragSecret0123456", "fragSecret0123456"},
	} {
		if got := URL(c.in); strings.Contains(got, c.secret) {
			t.Errorf("URL(%q) = %q: secret kept", c.in, got)
		}
		if got := NewScrubber(Secrets(c.in)...).Text("GET " + c.in + ": connection refused"); strings.Contains(got, c.secret) {
			t.Errorf("Scrubber(Secrets(%q)) leaves %q", c.in, got)
		}
	}
}

// Azure Functions' HTTP-trigger URLs carry the function key as
// ?code=…; "code" is not among the credential-like names, so the key stays
// in URL() output and run errors (promise 2, credential-like query params).
func TestAzureFunctionCodeParam(t *testing.T) {
	const in = "https://app.azurewebsites.net/api/nightly?code=AzFnKey0123456789abcdefXYZ=="
	if got := URL(in); strings.Contains(got, "AzFnKey0123456789") {
		t.Errorf("URL(%q) = %q", in, got)
	}
}

// TestWebUserinfoAndFragments: the rules for user-name-only userinfo (masked
// on http(s) and ws(s), kept elsewhere), for fragments, for "code" (a whole
// name only) and for a text URL whose password holds a '/'.
func TestWebUserinfoAndFragments(t *testing.T) {
	for in, want := range map[string]string{
		"https://ghp_abc123def456@api.github.com/x":              "https://xxxxx@api.github.com/x",
		"wss://tok3n@h/ws":                                       "wss://xxxxx@h/ws",
		"postgres://leasehold@127.0.0.1:5432/db?sslmode=disable": "postgres://leasehold@127.0.0.1:5432/db?sslmode=disable",
		"https://u:pw12@h/x":                                     "https://u:xxxxx@h/x",
		"https://h/cb#access_token=t0k3n&state=s1":               "https://h/cb#access_token=xxxxx&state=s1",
		"https://h/#/cb?id_token=t0k3n&x=1":                      "https://h/#/cb?id_token=xxxxx&x=1",
		"https://h/page#section-2":                               "https://h/page#section-2",
		"https://h/f?code=k3y&postcode=12345&status_code=3":      "https://h/f?code=xxxxx&postcode=12345&status_code=3",
		"https://h/f?Code=k3y":                                   "https://h/f?Code=xxxxx",
		"https://hook:ab/s3cret@example.com/x":                   "https://hook:xxxxx@example.com/x",
	} {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		`bad url "https://hook:ab/s3cret@example.com/x" here`: `bad url "https://hook:xxxxx@example.com/x" here`,
		"dial https://u:p@ss/w0rd@h:443/x?y=1: refused":       "dial https://u:xxxxx@h:443/x?y=1: refused",
		"GET https://ghp_abc123@api.github.com/x: 401":        "GET https://xxxxx@api.github.com/x: 401",
		"postgres://leasehold@h/db: refused":                  "postgres://leasehold@h/db: refused",
		"GET http://localhost:3000/users/@me: 404":            "GET http://localhost:3000/users/@me: 404",
		"GET http://u:pw12@h/x?mail=a@b.example: 500":         "GET http://u:xxxxx@h/x?mail=a@b.example: 500",
		"GET https://h/f?code=k3y&barcode=1 at the end":       "GET https://h/f?code=xxxxx&barcode=1 at the end",
	} {
		if got := Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
	}
	// Secrets of an unparsable URL include its password.
	in := "https://hook:ab/s3cret@example.com/x"
	if got := NewScrubber(Secrets(in)...).Text("x ab/s3cret y"); strings.Contains(got, "s3cret") {
		t.Errorf("Secrets(%q) = %q", in, Secrets(in))
	}
	// …and of a fragment after a route.
	in = "https://h/#/cb?id_token=fr4gTok3n"
	if got := NewScrubber(Secrets(in)...).Text("x fr4gTok3n y"); strings.Contains(got, "fr4gTok3n") {
		t.Errorf("Secrets(%q) = %q", in, Secrets(in))
	}
}
