//go:build linux

package procs

import "syscall"

// sysProcAttr puts a child in its own process group and has the kernel
// SIGKILL it should the supervising process die without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
