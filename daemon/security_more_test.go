package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testkit/eventually"
)

// Found by review: the MySQL backend takes its password from $MYSQL_PWD and pgx from
// $PGPASSWORD; env_passthrough may name them, so the backend password
// reaches a job (promise 1: backend passwords never reach a job).
func TestEnvPassthroughOfBackendPasswordVars(t *testing.T) {
	for _, c := range []struct{ backend, name string }{
		{"mysql://leasehold@127.0.0.1:3306/leasehold", "MYSQL_PWD"},
		{"postgres://leasehold@127.0.0.1:5432/leasehold", "PGPASSWORD"},
	} {
		yml := "backend: " + c.backend + "\njobs:\n  - name: r\n    schedule: \"@daily\"\n    command: {argv: [x], env_passthrough: [" + c.name + "]}\n"
		if _, err := Parse("c.yaml", []byte(yml)); err == nil {
			t.Errorf("backend %s with env_passthrough [%s] was accepted: the job gets the backend password", c.backend, c.name)
		}
	}
	// And the job does see it.
	const pw = "mysql-backend-pw-hunter2"
	t.Setenv("MYSQL_PWD", pw)
	out := filepath.Join(t.TempDir(), "env")
	j := &JobConfig{Name: "report", Command: &CommandJob{Argv: []string{"sh", "-c", `env > "$OUT"`}, Env: map[string]string{"OUT": out}, EnvPassthrough: []string{"MYSQL_PWD"}}}
	if err := commandFunc(j, "web-1", nil, nil)(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(out); strings.Contains(string(data), pw) {
		t.Errorf("the job's environment holds the MySQL backend password ($MYSQL_PWD)")
	}
}

// Found by review: an HTTP job URL whose userinfo password holds an unescaped '/'
// does not parse; the config error repeats the URL verbatim (redact.URL
// falls back to name=value masking only), password included (promise 2).
func TestHTTPJobURLPasswordNotInConfigError(t *testing.T) {
	const secret = "s3cret-hook-pw-42"
	yml := "jobs:\n  - name: hook\n    schedule: \"@daily\"\n    http: {url: \"https://hook:ab/" + secret + "@example.com/x\"}\n"
	_, err := Parse("c.yaml", []byte(yml))
	if err == nil {
		t.Fatal("accepted")
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("config error shows the URL password: %v", err)
	}
}

// Found by review: the token file's owner is not checked (only its mode), and a
// symlink is followed. A local user who can write next to the database
// (e.g. sqlite:///tmp/... or a group-writable state dir) plants a 0600
// file — or a symlink to one — holding a token they chose; a daemon running
// as root adopts it as its admin token instead of generating one (promise 4).
func TestPlantedTokenFileRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	dir := t.TempDir()
	_ = os.Chmod(dir, 0o1777) // a shared directory such as /tmp
	db := filepath.Join(dir, "leasehold.db")
	const planted = "attacker-chosen-token-0123456789abcdef"
	// The attacker's own file, linked at the token path.
	own := filepath.Join(dir, "mine")
	if err := os.WriteFile(own, []byte(planted+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(own, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(own, db+AdminTokenSuffix); err != nil {
		t.Fatal(err)
	}
	secret, created, err := loadOrCreateToken(db + AdminTokenSuffix)
	if err == nil && secret == planted {
		t.Errorf("loadOrCreateToken adopted a token from a symlink to a file owned by uid 65534 (created=%v): the planter holds the admin token", created)
	}
	// A plain planted file (no symlink) owned by another user.
	db2 := filepath.Join(dir, "other.db")
	if err := os.WriteFile(db2+AdminTokenSuffix, []byte(planted+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Chown(db2+AdminTokenSuffix, 65534, 65534)
	if s, _, err := loadOrCreateToken(db2 + AdminTokenSuffix); err == nil && s == planted {
		t.Errorf("loadOrCreateToken adopted a token file owned by uid 65534")
	}
	// The CLI may read it (root running status for a daemon of another
	// user); a symlink it refuses all the same.
	if _, err := ReadAdminToken(db + AdminTokenSuffix); err == nil {
		t.Errorf("ReadAdminToken followed a symbolic link")
	}
}

// Found by review: an HTTP job's answer is kept as head (512 B) + tail; scrubbing
// runs after the cut, so a secret the endpoint echoes across the cut
// leaves its first bytes in the run history served to read tokens
// (promise 2).
func TestHTTPResultSecretNotSplitAtCut(t *testing.T) {
	t.Setenv(EnvAdminToken, "")
	t.Setenv(EnvReadToken, "")
	const secret = "sk_live_0123456789abcdefghijklmnopqrstuv"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound) // an error page repeating the request
		fmt.Fprintf(w, "%s%s%s", strings.Repeat("a", 480), r.URL.RequestURI(), strings.Repeat("b", 2000))
	}))
	defer srv.Close()
	dir := t.TempDir()
	db := filepath.Join(dir, "d.db")
	yml := "instance: r1\nhttp:\n  listen: 127.0.0.1:0\njobs:\n  - name: echo\n    schedule: \"@every 300ms\"\n    lease_ttl: 2s\n    http: {url: \"" + srv.URL + "/hook?api_key=" + secret + "\"}\n"
	d, _ := startWithLog(t, dir, db, yml)
	_, tok, _ := d.AdminToken()
	base := "http://" + d.AdminAddr().String()
	var body, last string
	eventually.Within(20*time.Second, func() bool {
		req, _ := http.NewRequest("GET", base+"/api/v1/runs?job=echo", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var page struct {
			Runs []struct{ State, Result, Error string }
		}
		_ = json.Unmarshal(b, &page)
		last = string(b)
		if len(page.Runs) > 0 && page.Runs[0].State != "running" {
			body = string(b)
			return true
		}
		return false
	})
	if body == "" {
		t.Fatalf("no finished run: %s", last)
	}
	if strings.Contains(body, secret[:16]) {
		i := strings.Index(body, secret[:16])
		t.Errorf("/api/v1/runs shows the first bytes of the job URL's api_key: …%s…", body[i-14:i+18])
	}
}
