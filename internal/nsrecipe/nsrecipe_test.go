package nsrecipe

import (
	"strings"
	"testing"
)

// TestEveryRecipeParses: each backend section of docs/namespaces.md that
// the namespace tests run has a code block with commands in it.
func TestEveryRecipeParses(t *testing.T) {
	for _, h := range []string{"Redis", "etcd", "ZooKeeper"} {
		c, err := ShellCommands(h, nil)
		if err != nil || len(c) == 0 {
			t.Errorf("%s: %v, %d commands", h, err, len(c))
		}
		t.Logf("%s: %q", h, c)
	}
	for _, h := range []string{"PostgreSQL", "MySQL"} {
		s, err := SQLStatements(h, strings.NewReplacer())
		if err != nil || len(s) == 0 {
			t.Errorf("%s: %v, %d statements", h, err, len(s))
		}
		t.Logf("%s: %q", h, s)
	}
}
