//go:build !linux

package main

// workMain: the "work" helper is used by Linux-only tests.
func workMain() int { return 2 }
