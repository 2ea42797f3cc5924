package main

import (
	"strings"
	"testing"
)

// TestCompletion: "leasehold completion bash|zsh|fish" prints a script
// for that shell, and the hidden __complete command it calls completes
// leasehold's own subcommands.
func TestCompletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for shell, want := range map[string]string{
		"bash": "__start_leasehold",
		"zsh":  "#compdef leasehold",
		"fish": "complete -c leasehold",
	} {
		if r := e.expect(0, "completion", shell); !strings.Contains(r.stdout, want) {
			t.Errorf("leasehold completion %s lacks %q:\n%.300s", shell, want, r.stdout)
		}
	}
	r := e.expect(0, "__complete", "lo")
	for _, sub := range []string{"lock", "locks"} {
		if !strings.Contains("\n"+r.stdout, "\n"+sub+"\t") && !strings.Contains("\n"+r.stdout, "\n"+sub+"\n") {
			t.Errorf("completing \"lo\" does not offer %q:\n%s", sub, r.stdout)
		}
	}
}
