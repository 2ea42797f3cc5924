package daemon

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestReloadErrorShowsNoSecretOfTheNewBackend: a reload that changes the
// backend is refused naming the old and the new URL; the new one's
// password comes from a ${NAME} of the new config, which the running
// daemon's scrubber does not know, and may be pasted raw (here with a '#',
// so the URL does not parse and its userinfo is not found as a URL's). The
// error shows neither.
func TestReloadErrorShowsNoSecretOfTheNewBackend(t *testing.T) {
	for i, pw := range []string{"hunter2#x", "hunter2?x", "hunter2/x", "hunter2"} {
		t.Run(fmt.Sprint(i), func(t *testing.T) { // the name is in the temp dir's path
			t.Setenv("LH_TEST_NEW_DB_PASSWORD", pw)
			d := runDaemon(t, lifeYAML)
			dir := filepath.Dir(d.cfg.path)
			next := parseYAML(t, dir, "backend: \"postgres://u:${LH_TEST_NEW_DB_PASSWORD}@127.0.0.1:1/db\"\n"+lifeYAML)
			err := d.Reload(next)
			if !errors.Is(err, ErrNotReloaded) || !strings.Contains(err.Error(), "backend") {
				t.Fatalf("Reload = %v, want ErrNotReloaded naming the backend", err)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("Reload error shows the new backend's password: %v", err)
			}
		})
	}
}
