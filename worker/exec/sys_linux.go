//go:build linux

package exec

import "syscall"

// sysProcAttr puts a program in a process group of its own and has the
// kernel SIGKILL it should the thread that started it (the spawner's,
// which lives as long as the backend) end without Close.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
