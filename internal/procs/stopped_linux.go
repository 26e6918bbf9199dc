//go:build linux

package procs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// WaitStopped waits up to timeout until every thread of process pid is
// stopped (state T or t in /proc/PID/task/TID/stat). kill(SIGSTOP)
// returns before the process stops: a thread that is running, or about to
// run, on another CPU goes on until it next enters the kernel, and on a
// busy machine that thread can still answer a request sent after the
// signal. A process that is gone counts as stopped.
func WaitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		running, err := runningThread(pid)
		if err != nil || running == "" {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("procs: pid %d is not stopped %v after SIGSTOP (thread %s still runs)", pid, timeout, running)
		}
		time.Sleep(time.Millisecond)
	}
}

// runningThread returns the id of a thread of pid that is not stopped, or
// "" when all are (or the process is gone).
func runningThread(pid int) (string, error) {
	dir := filepath.Join("/proc", fmt.Sprint(pid), "task")
	tasks, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return "", nil
		}
		return "", fmt.Errorf("procs: %w", err)
	}
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "stat"))
		if err != nil {
			continue // the thread ended
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) {
			return "", fmt.Errorf("procs: unexpected %s/%s/stat: %q", dir, t.Name(), s)
		}
		switch s[i+2] {
		case 'T', 't', 'Z', 'X':
		default:
			return t.Name(), nil
		}
	}
	return "", nil
}
