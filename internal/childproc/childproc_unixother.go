//go:build unix && !linux

package childproc

import "syscall"

// dieWithParent: no Pdeathsig outside Linux.
func dieWithParent(*syscall.SysProcAttr) {}
