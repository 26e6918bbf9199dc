//go:build !unix

package main

import (
	"os"
	"syscall"
)

// childSysProcAttr: no process groups here.
func childSysProcAttr() *syscall.SysProcAttr { return nil }

// signalGroup can only kill outright on this platform.
func signalGroup(p *os.Process, _ syscall.Signal) error { return p.Kill() }
