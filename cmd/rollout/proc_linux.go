//go:build linux

package main

import (
	"os"
	"syscall"
)

// childSysProcAttr puts a child in its own process group (a terminal's
// Ctrl-C reaches only the demo, which then stops its children in order) and
// has the kernel kill it should the demo itself die without cleaning up.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup sends sig to p's whole process group.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	return syscall.Kill(-p.Pid, sig)
}
