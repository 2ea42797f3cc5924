package harness_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/leasehold/leasehold/internal/chaos/checker"
	"github.com/leasehold/leasehold/internal/chaos/harness"
)

// A chaos run over Redis: 5 workers (this program, started again as
// workers: it calls harness.WorkerFromEnv first thing), 30 s of every
// fault, then the checker's verdict.
func ExampleExecute() {
	if code, ok := harness.WorkerFromEnv(); ok {
		os.Exit(code)
	}
	exe, _ := os.Executable()
	cfg := harness.Config{
		Backend: "redis", Instances: 5, Duration: 30 * time.Second, Seed: 7, Out: "/tmp/chaos-redis",
		WorkerCommand: func(env []string) *exec.Cmd {
			cmd := exec.Command(exe)
			cmd.Env = env
			return cmd
		},
	}
	if _, err := harness.Execute(context.Background(), cfg); err != nil {
		fmt.Println(err)
		return
	}
	r, err := checker.Check(cfg.Out, checker.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(r.Summary())
}
