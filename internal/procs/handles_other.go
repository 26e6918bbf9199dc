//go:build !linux

package procs

import (
	"syscall"
	"time"
)

// WaitHandles cannot see a process's signal dispositions here (no /proc);
// it returns at once. The harness and the end-to-end tests that signal
// processes run on Linux.
func WaitHandles(pid int, sig syscall.Signal, timeout time.Duration) error { return nil }
