package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestConfigDocsCoverEveryField: every field of the config file has its
// documentation in configDocs, and every entry there is a field.
func TestConfigDocsCoverEveryField(t *testing.T) {
	fields := map[string]bool{}
	for _, f := range configFields() {
		fields[f.path] = true
		if f.doc.Doc == "" {
			t.Errorf("config field %s has no documentation in configDocs", f.path)
		}
	}
	for path := range configDocs {
		if !fields[path] {
			t.Errorf("configDocs documents %s, which is no config field", path)
		}
	}
	if len(fields) < 40 {
		t.Fatalf("only %d config fields found", len(fields))
	}
}

// TestConfigDocsUpToDate: docs/config.md and docs/config.schema.json are
// what the code generates (go run ./internal/configdoc writes them).
func TestConfigDocsUpToDate(t *testing.T) {
	for name, want := range map[string]string{
		"config.md":          ConfigReference(),
		"config.schema.json": string(ConfigSchema()),
	} {
		got, err := os.ReadFile("../docs/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("docs/%s differs from what the code generates: run go run ./internal/configdoc", name)
		}
	}
}

// TestExampleConfigsValidate: the reference's example config and the
// README's parse, and validate against the schema; configs with a bad
// value, a missing required field or an unknown field do not.
func TestExampleConfigsValidate(t *testing.T) {
	t.Setenv("REDIS_PASSWORD", "example-password")
	var schema map[string]any
	if err := json.Unmarshal(ConfigSchema(), &schema); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(# leasehold.yaml.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no ```yaml block starting with # leasehold.yaml")
	}
	for name, text := range map[string]string{"ExampleConfig": ExampleConfig, "README.md": string(m[1])} {
		if _, err := Parse("example.yaml", []byte(text)); err != nil {
			t.Errorf("%s does not parse: %v", name, err)
		}
		if errs := validateSchema(t, text, schema); len(errs) > 0 {
			t.Errorf("%s does not validate against the schema: %v", name, errs)
		}
	}
	for text, want := range map[string]string{
		"jobs: [{name: a, schedule: '@daily', mode: sometimes, command: {argv: [x]}}]": "jobs[0].mode",
		"jobs: [{name: a, command: {argv: [x]}}]":                                      "jobs[0]: required schedule",
		"jobs: [{name: a, schedule: '@daily'}]":                                        "jobs[0]: exactly one of",
		"grace: soon":                                                                  "grace: pattern",
		"gracee: 1s":                                                                   "gracee: not allowed",
		"jobs: [{name: a, schedule: '@daily', max_concurrent: x, http: {url: 'http://h'}}]": "jobs[0].max_concurrent: want integer",
	} {
		errs := validateSchema(t, text, schema)
		if !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, want) }) {
			t.Errorf("schema check of %q = %v, want an error containing %q", text, errs, want)
		}
	}
}

// validateSchema checks YAML text against the parts of JSON Schema that
// ConfigSchema uses: type, properties, additionalProperties, required,
// items, enum, pattern and oneOf of required sets.
func validateSchema(t *testing.T, text string, schema map[string]any) []string {
	t.Helper()
	var doc any
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatal(err)
	}
	var errs []string
	var check func(v any, s map[string]any, at string)
	check = func(v any, s map[string]any, at string) {
		fail := func(format string, args ...any) { errs = append(errs, at+": "+fmt.Sprintf(format, args...)) }
		switch s["type"] {
		case "object":
			obj, ok := v.(map[string]any)
			if !ok {
				fail("want object, got %T", v)
				return
			}
			props, _ := s["properties"].(map[string]any)
			for k, sub := range obj {
				ps, known := props[k].(map[string]any)
				switch {
				case known:
					check(sub, ps, strings.TrimPrefix(at+"."+k, "."))
				case s["additionalProperties"] == false:
					errs = append(errs, strings.TrimPrefix(at+"."+k, ".")+": not allowed")
				default:
					if ap, ok := s["additionalProperties"].(map[string]any); ok {
						check(sub, ap, at+"."+k)
					}
				}
			}
			req, _ := s["required"].([]any)
			for _, r := range req {
				if _, ok := obj[r.(string)]; !ok {
					fail("required %s missing", r)
				}
			}
			if one, ok := s["oneOf"].([]any); ok {
				n := 0
				for _, alt := range one {
					all := true
					for _, r := range alt.(map[string]any)["required"].([]any) {
						_, has := obj[r.(string)]
						all = all && has
					}
					if all {
						n++
					}
				}
				if n != 1 {
					fail("exactly one of %v is required, %d given", one, n)
				}
			}
		case "array":
			arr, ok := v.([]any)
			if !ok {
				fail("want array, got %T", v)
				return
			}
			for i, e := range arr {
				check(e, s["items"].(map[string]any), fmt.Sprintf("%s[%d]", at, i))
			}
		case "string":
			str, ok := v.(string)
			if !ok {
				fail("want string, got %T", v)
				return
			}
			if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(str) {
				fail("pattern %s does not match %q", p, str)
			}
		case "integer":
			if _, ok := v.(int); !ok {
				fail("want integer, got %T", v)
			}
		case "boolean":
			if _, ok := v.(bool); !ok {
				fail("want boolean, got %T", v)
			}
		}
		if enum, ok := s["enum"].([]any); ok && !slices.Contains(enum, v) {
			fail("%v is not one of %v", v, enum)
		}
	}
	check(doc, schema, "")
	return errs
}
