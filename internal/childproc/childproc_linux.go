package childproc

import "syscall"

// dieWithParent has the kernel SIGKILL the child when the thread that
// started it exits (Pdeathsig).
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
