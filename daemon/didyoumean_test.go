package daemon

import (
	"strings"
	"testing"
)

// TestDidYouMeanValues: a near miss of a value a field takes (mode,
// misfire, crash, http.redirects) is named, as a near miss of a field
// name is at every level.
func TestDidYouMeanValues(t *testing.T) {
	const job = "jobs:\n  - name: a\n    schedule: '@daily'\n"
	for _, c := range []struct{ yml, want string }{
		{job + "    mode: onse\n    command: {argv: [x]}\n", `(did you mean "once"?)`},
		{job + "    mode: every_instance\n    command: {argv: [x]}\n", `(did you mean "every-instance"?)`},
		{job + "    misfire: skp\n    command: {argv: [x]}\n", `(did you mean "skip"?)`},
		{job + "    misfire: run_all\n    command: {argv: [x]}\n", `(did you mean "run-all"?)`},
		{job + "    crash: Retyr\n    command: {argv: [x]}\n", `(did you mean "retry"?)`},
		{job + "    http: {url: 'http://127.0.0.1/', redirects: nnone}\n", `(did you mean "none"?)`},
		{job + "    http: {ur: 'http://127.0.0.1/'}\n", `(did you mean "url"?)`},
		{"namspace: x\n" + job + "    command: {argv: [x]}\n", `(did you mean "namespace"?)`},
	} {
		_, err := Parse("/tmp/x.yaml", []byte(c.yml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %s", c.yml, err, c.want)
		}
	}
	_, err := Parse("/tmp/x.yaml", []byte(job+"    mode: sideways\n    command: {argv: [x]}\n"))
	if err == nil || strings.Contains(err.Error(), "did you mean") {
		t.Errorf("a value far from every option got a suggestion: %v", err)
	}
}
