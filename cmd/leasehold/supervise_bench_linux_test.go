package main

import (
	"os/exec"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/childproc"
	"github.com/leasehold/leasehold/internal/supervisor"
)

// BenchmarkCommandStart compares starting (and waiting for) /bin/true the
// way command jobs did before the supervisor (childproc: own group,
// Pdeathsig) with starting it under a supervisor (the leasehold binary
// re-executed), in each kill mode: "cold" spawns the supervisor then
// (package Start), "spare" uses one spawned ahead, as the daemon's pool and
// "leasehold lock" do (the spawn is outside the timed part). Issue 24
// allows the supervisor 5 ms more than the direct start.
func BenchmarkCommandStart(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			c, err := childproc.Start(exec.Command("/bin/true"), childproc.Options{Group: true, DieWithParent: true})
			if err != nil {
				b.Fatal(err)
			}
			if err := c.Wait(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, mode := range []string{"auto", supervisor.ModeGroup} {
		for _, spare := range []bool{false, true} {
			name := "supervised-cold-" + mode
			if spare {
				name = "supervised-spare-" + mode
			}
			b.Run(name, func(b *testing.B) {
				if mode == supervisor.ModeGroup {
					b.Setenv(supervisor.ModeEnv, supervisor.ModeGroup)
				} else {
					b.Setenv(supervisor.ModeEnv, "")
				}
				for b.Loop() {
					var (
						h   *supervisor.Handle
						err error
					)
					if spare {
						b.StopTimer()
						sp, serr := supervisor.Spawn(supervisor.Options{Exe: bin})
						if serr != nil {
							b.Fatal(serr)
						}
						if serr := sp.WaitReady(); serr != nil {
							b.Fatal(serr)
						}
						b.StartTimer()
						h, err = sp.Start(supervisor.Spec{Argv: []string{"/bin/true"}}, time.Time{}, 0)
					} else {
						h, err = supervisor.Start(supervisor.Spec{Argv: []string{"/bin/true"}}, supervisor.Options{Exe: bin})
					}
					if err != nil {
						b.Fatal(err)
					}
					if res := h.Wait(); res.Err != nil {
						b.Fatal(res.Err)
					}
				}
			})
		}
	}
}
