//go:build !linux

package s3server

import "syscall"

// procAttr: without Pdeathsig the server is stopped by Close only.
func procAttr() *syscall.SysProcAttr { return nil }
