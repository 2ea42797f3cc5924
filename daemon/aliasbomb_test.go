package daemon

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestParseAliasBombEndsFast (issue 27 item 8): a YAML alias bomb far
// under MaxConfigSize kept Parse busy for minutes: its field-type check
// followed every alias before the YAML decoder's guard against excessive
// aliasing could refuse the document. Parse refuses it, as a config
// error. The wait is a hang guard, not a speed check: the old Parse took
// minutes, the refusal takes milliseconds, and 2 minutes leaves a starved
// host all the room it needs.
func TestParseAliasBombEndsFast(t *testing.T) {
	// One argv of 90,000 items, and 90,000 jobs that are each an alias
	// of one job using it: 8.1e9 nodes to visit through aliases, in
	// ~620 KB.
	var b strings.Builder
	b.WriteString("argv: &l [" + strings.Repeat("x, ", 90_000) + "x]\n")
	b.WriteString("job: &j {name: a, schedule: \"@every 1h\", command: {argv: *l}}\n")
	b.WriteString("jobs: [" + strings.Repeat("*j, ", 90_000) + "*j]\n")
	if b.Len() > MaxConfigSize {
		t.Fatalf("the bomb is %d bytes, over the cap", b.Len())
	}
	done := make(chan error, 1)
	go func() { _, err := Parse("/tmp/bomb.yaml", []byte(b.String())); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrConfig) {
			t.Fatalf("Parse of an alias bomb = %v, want ErrConfig", err)
		}
		t.Logf("refused: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("Parse of an alias bomb still busy after 2 minutes: it follows the aliases")
	}
}
