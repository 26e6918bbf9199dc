//go:build unix && !linux

package exec

import "syscall"

// sysProcAttr puts a program in a process group of its own (this system
// has no parent-death signal: a worker killed without Close leaves its
// programs to notice the end of their standard input).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
