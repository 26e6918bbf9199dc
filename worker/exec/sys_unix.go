//go:build unix

package exec

import "syscall"

// supported: process groups and signals are available.
const supported = true

const (
	termSignal = syscall.SIGTERM
	killSignal = syscall.SIGKILL
)

// signal sends sig to the program's whole process group (it is the group's
// leader). A group that is gone already is no error.
func (c *child) signal(sig syscall.Signal) {
	_ = syscall.Kill(-c.pid, sig)
}
