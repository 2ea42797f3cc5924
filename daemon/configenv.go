package daemon

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/leasehold/leasehold/internal/redact"
)

var envRef = regexp.MustCompile(`\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\{`)

// envNames returns the NAMEs of the ${NAME} references of s.
func envNames(s string) []string {
	var names []string
	for _, m := range envRef.FindAllStringSubmatch(s, -1) {
		if m[1] != "" {
			names = append(names, m[1])
		}
	}
	return names
}

// expandEnv replaces each ${NAME} of s by the environment variable NAME
// and $${ by ${. An unset variable, or a ${ that does not start a
// reference, is an error naming it (never the value). secrets are the
// values of the variables whose names look like credentials (PASSWORD,
// TOKEN, SECRET, …), for the scrubber: wherever they land in the URL.
func expandEnv(s string) (out string, secrets []string, err error) {
	var errs []string
	out = envRef.ReplaceAllStringFunc(s, func(m string) string {
		switch {
		case m == "$${":
			return "${"
		case m == "${":
			errs = append(errs, `"${" starts no ${NAME} (write $${ for a literal ${)`)
			return m
		}
		name := m[2 : len(m)-1]
		v, ok := os.LookupEnv(name)
		if !ok {
			errs = append(errs, fmt.Sprintf("environment variable %s (in ${%s}) is not set", name, name))
		}
		if redact.SensitiveName(name) {
			secrets = append(secrets, v)
		}
		return v
	})
	if len(errs) > 0 {
		return "", nil, errors.New(strings.Join(errs, "; "))
	}
	return out, secrets, nil
}
