//go:build unix

package procs

import (
	"os"
	"syscall"
)

// signalGroup sends sig to p's whole process group.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	return syscall.Kill(-p.Pid, sig)
}

// resume sends SIGCONT to p's group, in case it was paused.
func resume(p *os.Process) error { return signalGroup(p, syscall.SIGCONT) }
