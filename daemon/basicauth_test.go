package daemon

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestEchoedBasicAuthMasked (issue 27 item 8): a job URL's password is
// sent by net/http as "Authorization: Basic base64(user:password)"; an
// endpoint that echoes its request put that base64 in the run history
// unmasked. The daemon's scrubber masks the base64 form of a URL's
// userinfo and of a Basic header value, as it masks the password.
func TestEchoedBasicAuthMasked(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.Header.Write(w)
	}))
	defer echo.Close()
	const user, password = "deploy", "pa55-word-0123456789"
	u := strings.Replace(echo.URL, "http://", "http://"+user+":"+password+"@", 1)
	cfg, err := Parse("/tmp/b.yaml", []byte(`jobs:
  - name: hook
    schedule: "@every 1h"
    http: {url: "`+u+`"}
  - name: hdr
    schedule: "@every 1h"
    http: {url: "`+echo.URL+`", headers: {Authorization: "Basic `+base64.StdEncoding.EncodeToString([]byte("other:hdr-secret-0123456789"))+`"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	scrub := cfg.scrubber()
	for _, j := range cfg.Jobs {
		req, err := http.NewRequest("GET", j.HTTP.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range j.HTTP.Headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "Basic ") {
			t.Fatalf("%s: the endpoint did not echo the Authorization header: %s", j.Name, body)
		}
		got := scrub.Text(string(body))
		for _, secret := range []string{base64.StdEncoding.EncodeToString([]byte(user + ":" + password)), base64.StdEncoding.EncodeToString([]byte("other:hdr-secret-0123456789"))} {
			if strings.Contains(got, secret) {
				t.Errorf("%s: the echoed answer, scrubbed, still holds the Basic credentials %s:\n%s", j.Name, secret, got)
			}
		}
	}
}
