package daemon

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Type checking of a config file against Config, before it is decoded, so
// that a value of the wrong kind is reported with its field and in the
// config's words ("value "abc" is not a whole number"), not yaml's and Go's
// ("cannot unmarshal !!str `abc` into int").

// typeErr is one value of the wrong kind.
type typeErr struct {
	line  int
	field string
	msg   string
}

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

// checkTypes walks n against t and reports every value that cannot decode
// into it. Unknown fields are left to the decoder.
func checkTypes(n *yaml.Node, t reflect.Type, field string, out *[]typeErr) {
	if n.Kind == yaml.DocumentNode {
		for _, c := range n.Content {
			checkTypes(c, t, field, out)
		}
		return
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		checkTypes(n.Alias, t, field, out)
		return
	}
	if n.ShortTag() == "!!null" {
		return // decodes to the zero value
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	fail := func(want string) {
		*out = append(*out, typeErr{line: n.Line, field: field, msg: describeNode(n) + " is not " + want})
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		if n.Kind != yaml.ScalarNode {
			fail(kindWords(t))
		}
		return // its UnmarshalYAML checks the value
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			fail(kindWords(t))
			return
		}
		fields := map[string]reflect.Type{}
		for i := range t.NumField() {
			if name := yamlName(t.Field(i)); name != "" {
				fields[name] = t.Field(i).Type
			}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if ft, ok := fields[n.Content[i].Value]; ok {
				checkTypes(n.Content[i+1], ft, join(field, n.Content[i].Value), out)
			}
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			fail(kindWords(t))
			return
		}
		for i, c := range n.Content {
			checkTypes(c, t.Elem(), fmt.Sprintf("%s[%d]", field, i), out)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			fail(kindWords(t))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			checkTypes(n.Content[i+1], t.Elem(), join(field, n.Content[i].Value), out)
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			fail(kindWords(t))
		}
	case reflect.Int, reflect.Int64, reflect.Int32:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
			fail(kindWords(t))
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			fail(kindWords(t))
		}
	}
}

// kindWords says what a value of t is, for people.
func kindWords(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeOf(Duration(0)) {
		return "a duration such as 30s or 5m"
	}
	switch t.Kind() {
	case reflect.Struct:
		return "a mapping of fields (name: value)"
	case reflect.Slice:
		return "a list of " + plural(t.Elem()) + " (such as [a, b])"
	case reflect.Map:
		return "a mapping of names to " + plural(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "a whole number"
	case reflect.Bool:
		return "true or false"
	}
	return "valid here"
}

func plural(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "strings"
	case reflect.Struct:
		return "mappings"
	}
	return "values"
}

// describeNode names a value for a message: a scalar by its text, else by
// its kind.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	}
	v := n.Value
	if len(v) > 60 {
		v = v[:60] + "…"
	}
	return fmt.Sprintf("value %q", v)
}

func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	if name == "" {
		return strings.ToLower(f.Name)
	}
	return name
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

var indexRE = regexp.MustCompile(`\[\d+\]`)

// unknownFieldWords says that name is no field at path (its place, such as
// "jobs[0].comand"; "" if not known), names the fields there and the one
// meant if it is a near miss — instead of yaml's "field comand not found in
// type daemon.JobConfig".
func unknownFieldWords(path, name string) string {
	if path == "" { // not placed: the fields around it are not known
		return fmt.Sprintf("unknown field %q", name)
	}
	parent := ""
	if i := strings.LastIndex(path, "."); i >= 0 {
		parent = indexRE.ReplaceAllString(path[:i], "[]")
	}
	var known []string
	for _, f := range configFields() {
		p, child := "", f.path
		if i := strings.LastIndex(f.path, "."); i >= 0 {
			p, child = f.path[:i], f.path[i+1:]
		}
		if p == parent {
			known = append(known, child)
		}
	}
	msg := fmt.Sprintf("unknown field %q", name)
	if len(known) == 0 {
		return msg
	}
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", best)
	}
	return msg + "; the fields here are " + strings.Join(known, ", ")
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
