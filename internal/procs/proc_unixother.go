//go:build unix && !linux

package procs

import "syscall"

// sysProcAttr puts a child in its own process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
