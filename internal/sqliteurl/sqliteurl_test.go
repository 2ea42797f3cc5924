package sqliteurl

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPath(t *testing.T) {
	wd, _ := os.Getwd()
	for in, want := range map[string]string{
		"sqlite:///var/lib/l.db?synchronous=normal": "/var/lib/l.db",
		"sqlite://rel/l.db":                         filepath.Join(wd, "rel/l.db"),
		"sqlite:rel.db":                             filepath.Join(wd, "rel.db"),
		"/abs/bare.db":                              "/abs/bare.db",
		"redis://h:6379/0":                          "",
		"memory://":                                 "",
	} {
		got, ok := Path(in)
		if got != want || ok != (want != "") {
			t.Errorf("Path(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}
