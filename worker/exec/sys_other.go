//go:build !unix

package exec

import "syscall"

// supported: New refuses to start on a system without process groups.
const supported = false

const (
	termSignal = syscall.SIGTERM
	killSignal = syscall.SIGKILL
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func (c *child) signal(syscall.Signal) {
	if c.cmd.Process != nil {
		_ = c.cmd.Process.Kill()
	}
}
