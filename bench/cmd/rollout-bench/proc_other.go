//go:build !linux

package main

import (
	"errors"
	"syscall"
	"time"
)

var errNotLinux = errors.New("rollout-bench runs on Linux only (it reads /proc)")

func supported() error                   { return errNotLinux }
func procCPU(int) (time.Duration, error) { return 0, errNotLinux }
func procPeakRSS(int) (int64, error)     { return 0, errNotLinux }
func procRSS(int) (int64, error)         { return 0, errNotLinux }

func procStatusKB(int, string) (int64, error) { return 0, errNotLinux }

func memAvailable() (int64, error) { return 0, errNotLinux }

func childAttr() *syscall.SysProcAttr { return nil }
