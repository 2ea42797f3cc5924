package daemon

import (
	"strings"
	"testing"
)

// TestEnvPassthroughRefusesBackendURLVariables (issue 27 item 8): a
// backend URL may take its password from ${NAME}; env_passthrough naming
// that variable handed the password to the job. Any variable the backend
// URL references is refused there, naming the field and the variable.
func TestEnvPassthroughRefusesBackendURLVariables(t *testing.T) {
	t.Setenv("LH_DB_PART", "s3cret-from-env")
	_, err := Parse("/tmp/e.yaml", []byte(`backend: "postgres://app:${LH_DB_PART}@127.0.0.1:5432/app"
jobs:
  - name: j
    schedule: "@every 1h"
    command: {argv: [/bin/true], env_passthrough: [LH_DB_PART]}
`))
	if err == nil || !strings.Contains(err.Error(), "env_passthrough") || !strings.Contains(err.Error(), "LH_DB_PART") {
		t.Fatalf("Parse with env_passthrough naming the backend URL's variable = %v; want an error naming env_passthrough and LH_DB_PART", err)
	}
	if strings.Contains(err.Error(), "s3cret-from-env") {
		t.Fatalf("the error shows the variable's value: %v", err)
	}
}
