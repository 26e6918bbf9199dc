package s3server

import "syscall"

// procAttr makes the server die with the harness (Linux's Pdeathsig).
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
