package daemon

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

// TestConfigTypeErrorsNameNoGoTypes: a value of the wrong kind is reported
// on its line with its field and the config's words; no message names a
// Go type or yaml tag.
func TestConfigTypeErrorsNameNoGoTypes(t *testing.T) {
	yaml := `grace: [1]
instance: {a: 1}
jobs:
  - name: t
    schedule: "@every 1s"
    max_concurrent: abc
    paused: maybe
    retry: 3
    command:
      argv: /bin/true
      env: [1]
http:
  tokens: {scope: read}
`
	_, err := Parse("c.yaml", []byte(yaml))
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("Parse = %v, want ErrConfig", err)
	}
	for _, want := range []string{
		"c.yaml:1: grace: a list is not a duration such as 30s or 5m",
		"c.yaml:2: instance: a mapping is not a string",
		`c.yaml:6: jobs[0].max_concurrent: value "abc" is not a whole number`,
		`c.yaml:7: jobs[0].paused: value "maybe" is not true or false`,
		`c.yaml:8: jobs[0].retry: value "3" is not a mapping of fields`,
		`c.yaml:10: jobs[0].command.argv: value "/bin/true" is not a list of strings`,
		"c.yaml:11: jobs[0].command.env: a list is not a mapping of names to strings",
		"c.yaml:13: http.tokens: a mapping is not a list of mappings",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q:\n%v", want, err)
		}
	}
	if m := regexp.MustCompile(`!!\w+|unmarshal|\[\]string|map\[|daemon\.|\binto (int|bool|string)\b`).FindString(err.Error()); m != "" {
		t.Errorf("errors name a Go type or yaml tag (%q):\n%v", m, err)
	}
	// Each on its own line, nothing else (argv's "needs a program" would
	// only repeat its type error).
	if n := len(strings.Split(err.Error(), "\n")); n != 8 {
		t.Errorf("%d error lines, want 8:\n%v", n, err)
	}
}

// TestGoTypeWords: a yaml message checkTypes did not foresee loses its Go
// type.
func TestGoTypeWords(t *testing.T) {
	for in, want := range map[string]string{
		"line 3: cannot unmarshal !!str `abc` into int":     `line 3: value "abc" is not valid here`,
		"line 4: cannot unmarshal !!seq into daemon.Config": "line 4: a list is not valid here",
		"line 5: cannot unmarshal !!map into []string":      "line 5: a mapping is not valid here",
	} {
		if got := goTypeWords(in); got != want {
			t.Errorf("goTypeWords(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestUnknownFieldNamesTheFieldsThere: an unknown field is named with the
// fields of its mapping and the near miss, not a Go type.
func TestUnknownFieldNamesTheFieldsThere(t *testing.T) {
	_, err := Parse("c.yaml", []byte("gracee: 1s\njobs:\n  - name: t\n    schedule: \"@daily\"\n    command: {argv: [x], dirr: /}\n"))
	for _, want := range []string{
		`c.yaml:1: gracee: unknown field "gracee" (did you mean "grace"?); the fields here are backend, instance,`,
		`c.yaml:5: jobs[0].command.dirr: unknown field "dirr" (did you mean "dir"?); the fields here are argv, env, env_passthrough, dir, max_output`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse = %v, want an error containing %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "daemon.") {
		t.Errorf("an error names a Go type: %v", err)
	}
}
