//go:build !unix

package procs

import (
	"os"
	"syscall"
)

// sysProcAttr: no process groups on this platform.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// signalGroup can only kill outright on this platform: any signal ends the
// process.
func signalGroup(p *os.Process, _ syscall.Signal) error { return p.Kill() }

// resume: nothing is paused on this platform.
func resume(*os.Process) error { return nil }
