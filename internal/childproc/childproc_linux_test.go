package childproc

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestDieWithParent: a child started with DieWithParent by a process that
// is then SIGKILLed is killed by the kernel (Pdeathsig).
func TestDieWithParent(t *testing.T) {
	if os.Getenv("CHILDPROC_PARENT") != "" {
		// The parent: start the child, report its pid, and hang until killed.
		c, err := Start(exec.Command("sleep", "60"), Options{Group: true, DieWithParent: true})
		if err != nil {
			os.Exit(2)
		}
		_ = os.WriteFile(os.Getenv("CHILDPROC_PARENT"), []byte(itoa(c.Pid())+"\n"), 0o600)
		select {}
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	parent := exec.Command(os.Args[0], "-test.run=^TestDieWithParent$")
	parent.Env = append(os.Environ(), "CHILDPROC_PARENT="+pidFile)
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = parent.Process.Kill(); _ = parent.Wait() })
	child := readPids(t, pidFile, 1)[0]
	t.Cleanup(func() { _ = KillPID(child) })
	if gone(child) {
		t.Fatalf("child %d is gone before its parent was killed", child)
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	waitGone(t, child, 10*time.Second)
}
