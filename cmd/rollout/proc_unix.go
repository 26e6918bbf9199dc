//go:build unix && !linux

package main

import (
	"os"
	"syscall"
)

// childSysProcAttr puts a child in its own process group (a terminal's
// Ctrl-C reaches only the demo, which then stops its children in order).
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends sig to p's whole process group.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	return syscall.Kill(-p.Pid, sig)
}
