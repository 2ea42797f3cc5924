//go:build unix && !linux

package childproc

import "syscall"

// dieWithParent: no Pdeathsig outside Linux.
func dieWithParent(*syscall.SysProcAttr) {}

// BecomeSubreaper: no child subreapers outside Linux.
func BecomeSubreaper() error { return nil }

// Children: not known outside Linux.
func Children() []int { return nil }
