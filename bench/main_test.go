package bench

import (
	"os"
	"testing"
)

func osMkdirTemp() (string, error) { return os.MkdirTemp("", "leasehold-bench-") }

func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range servers {
		s.Stop()
		os.RemoveAll(s.Dir())
	}
	os.Exit(code)
}
