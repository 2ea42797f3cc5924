package daemon

import (
	"errors"
	"strings"
	"testing"
)

// TestBackendEnvExpansion: ${NAME} in backend takes the environment's
// value; the config's scrubber masks it as the URL's password; other
// fields are not expanded.
func TestBackendEnvExpansion(t *testing.T) {
	const secret = "s3cret-Pw-from-env"
	t.Setenv("LH_TEST_REDIS_PW", secret)
	t.Setenv("LH_TEST_REDIS_HOST", "127.0.0.1:6390")
	c, err := Parse("c.yaml", []byte(`backend: "redis://app:${LH_TEST_REDIS_PW}@${LH_TEST_REDIS_HOST}/0?prefix=a$${b:"
jobs:
  - name: t
    schedule: "@daily"
    command: {argv: [echo, "${LH_TEST_REDIS_PW}"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "redis://app:" + secret + "@127.0.0.1:6390/0?prefix=a${b:"; c.Backend != want {
		t.Fatalf("backend = %q, want %q", c.Backend, want)
	}
	if shown := c.scrubber().Text("opening " + c.Backend); strings.Contains(shown, secret) {
		t.Fatalf("the expanded password is not masked: %s", shown)
	}
	if got := c.Jobs[0].Command.Argv[1]; got != "${LH_TEST_REDIS_PW}" {
		t.Fatalf("argv was expanded: %q", got)
	}
}

// TestBackendEnvUnset: an unset variable is an error naming it and the
// field, changing nothing; so is a ${ that starts no reference.
func TestBackendEnvUnset(t *testing.T) {
	for text, want := range map[string]string{
		`backend: "redis://app:${LH_TEST_UNSET_PW}@h:6379"`: `c.yaml:1: backend: environment variable LH_TEST_UNSET_PW (in ${LH_TEST_UNSET_PW}) is not set`,
		`backend: "redis://app:${1x}@h:6379"`:               `c.yaml:1: backend: "${" starts no ${NAME}`,
	} {
		_, err := Parse("c.yaml", []byte(text+"\n"))
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want ErrConfig containing %q", text, err, want)
		}
	}
}

// TestBackendEnvSecretMaskedAnywhere: the value of a ${NAME} whose name
// looks like a credential is masked wherever it lands in the URL, not only
// as its password.
func TestBackendEnvSecretMaskedAnywhere(t *testing.T) {
	const secret = "db-name-that-is-a-secret"
	t.Setenv("LH_TEST_DB_SECRET", secret)
	t.Setenv("LH_TEST_DB_HOST", "db.internal")
	c, err := Parse("c.yaml", []byte("backend: \"postgres://app@${LH_TEST_DB_HOST}:5432/${LH_TEST_DB_SECRET}\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	shown := c.scrubber().Text("connecting to " + c.Backend)
	if strings.Contains(shown, secret) || !strings.Contains(shown, "db.internal") {
		t.Fatalf("scrubbed %q: want the secret masked and the host shown", shown)
	}
}
