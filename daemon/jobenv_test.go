package daemon

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestJobEnvironmentIsClean (issue 18 item 1): a command job sees PATH,
// HOME, LANG, TZ, its LEASEHOLD_* run variables and what its env and
// env_passthrough name — never the daemon's tokens or backend passwords.
func TestJobEnvironmentIsClean(t *testing.T) {
	const adminSecret, readSecret, pgSecret = "admin-secret-0123456789abcdef", "read-secret-0123456789abcdef", "pg-secret-hunter2"
	t.Setenv(EnvAdminToken, adminSecret)
	t.Setenv(EnvReadToken, readSecret)
	t.Setenv("PGPASSWORD", pgSecret)
	t.Setenv("LEASEHOLD_BACKEND", "postgres://u:"+pgSecret+"@127.0.0.1/db")
	t.Setenv("SHARED_OK", "passed")
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("TZ", "UTC")
	out := filepath.Join(t.TempDir(), "env")
	j := &JobConfig{Name: "report", Command: &CommandJob{
		Argv:           []string{"sh", "-c", `env > "$OUT"`},
		Env:            map[string]string{"OUT": out, "MODE": "full"},
		EnvPassthrough: []string{"SHARED_OK", "NOT_SET_ANYWHERE"},
	}}
	if err := commandFunc(j, "web-1", nil, nil)(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		name, _, _ := strings.Cut(line, "=")
		names = append(names, name)
	}
	sort.Strings(names)
	allowed := map[string]bool{"PATH": true, "HOME": true, "LANG": true, "TZ": true, "OUT": true, "MODE": true, "SHARED_OK": true,
		"LEASEHOLD_JOB": true, "LEASEHOLD_SCHEDULED_AT": true, "LEASEHOLD_TOKEN": true, "LEASEHOLD_ATTEMPT": true, "LEASEHOLD_INSTANCE": true,
		"PWD": true, "SHLVL": true, "_": true} // the last three: set by sh itself
	var extra []string
	for _, n := range names {
		if !allowed[n] {
			extra = append(extra, n)
		}
	}
	if len(extra) > 0 {
		t.Errorf("the job saw variables it was not given: %v", extra)
	}
	for _, want := range []string{"PATH", "LANG", "TZ", "SHARED_OK", "MODE", "LEASEHOLD_TOKEN"} {
		if !contains(names, want) {
			t.Errorf("the job lacks %s (all: %v)", want, names)
		}
	}
	for _, secret := range []string{adminSecret, readSecret, pgSecret} {
		if strings.Contains(string(data), secret) {
			t.Errorf("the job saw the secret %q", secret[:8])
		}
	}
}

// TestEnvPassthroughOfSecretsRefused: a config cannot pass the daemon's
// own tokens or backend URL through to a job.
func TestEnvPassthroughOfSecretsRefused(t *testing.T) {
	for _, name := range []string{EnvAdminToken, EnvReadToken, "LEASEHOLD_API_TOKEN", "LEASEHOLD_BACKEND", "MY_TOKEN_VAR", "bad=name"} {
		yml := "http:\n  tokens:\n    - {scope: read, token_env: MY_TOKEN_VAR}\njobs:\n  - name: r\n    schedule: \"@daily\"\n    command: {argv: [x], env_passthrough: [" + name + "]}\n"
		_, err := Parse("c.yaml", []byte(yml))
		if err == nil || !strings.Contains(err.Error(), "jobs[0].command.env_passthrough") || !strings.Contains(err.Error(), `"`+name+`"`) {
			t.Errorf("env_passthrough [%s]: err = %v, want an error naming the field and the variable", name, err)
		}
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
